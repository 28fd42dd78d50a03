"""TL502's fix spells torch.amp through a module-level import, or is not offered."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from torchlint.config import from_table
from torchlint.engine import lint_source


def _findings(source: str):  # type: ignore[no-untyped-def]
    return lint_source(source, "t.py", from_table({"select": ["TL502"]}, Path(".")))


def test_no_fix_without_a_torch_module_import() -> None:
    source = "from torch.cuda.amp import autocast\n\nwith autocast():\n    pass\n"
    (finding,) = _findings(source)
    assert finding.fix is None


def test_no_fix_when_torch_is_imported_only_inside_a_function() -> None:
    source = "from torch.cuda.amp import autocast\n\ndef f():\n    import torch\n\nwith autocast():\n    pass\n"
    (finding,) = _findings(source)
    assert finding.fix is None


def test_fix_uses_the_torch_alias() -> None:
    source = "import torch as th\n\nscaler = th.cuda.amp.GradScaler()\n"
    (finding,) = _findings(source)
    assert finding.fix is not None
    assert cst.Module([]).code_for_node(finding.fix.new) == 'th.amp.GradScaler("cuda")'
