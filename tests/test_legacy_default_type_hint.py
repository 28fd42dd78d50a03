"""TL204 on `torch.set_default_tensor_type`: the finding names what replaces it,
`torch.set_default_dtype` and (for a CUDA class) `torch.set_default_device`, not the
typed constructors' `torch.tensor(...)`."""

from __future__ import annotations

from torchlint.config import Config
from torchlint.engine import lint_source

SOURCE = """import torch
torch.set_default_tensor_type(torch.cuda.FloatTensor)
torch.set_default_tensor_type("torch.DoubleTensor")
x = torch.cuda.FloatTensor(3)
"""


def test_set_default_tensor_type_names_its_replacements() -> None:
    found = {f.line: f for f in lint_source(SOURCE, "t.py", Config(select=("TL204",)))}
    assert sorted(found) == [2, 3, 4]
    cuda, double, constructor = found[2], found[3], found[4]
    assert cuda.location.column == 1  # the call, once: not also its argument
    assert "torch.set_default_dtype(torch.float32)" in cuda.fix_hint and 'torch.set_default_device("cuda")' in cuda.fix_hint
    assert "torch.set_default_dtype(torch.float64)" in double.fix_hint and "set_default_device" not in double.fix_hint
    assert "torch.tensor(" not in cuda.message + cuda.fix_hint
    # Near miss: the typed constructor keeps its own advice.
    assert "torch.tensor(" in constructor.fix_hint + constructor.message and "set_default" not in constructor.fix_hint
