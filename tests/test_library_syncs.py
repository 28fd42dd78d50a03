"""Library calls that read a device tensor inside them (flash_attn's `unpad_input`: `nonzero`
and `.max().item()` of the mask), reached through a forward patched into a library's module
(FastChat's `LlamaAttention.forward = forward`): the library's model runs it once per layer
(fixtures/projects/patched; the loops: fixtures/rules/TL101/*library_reads.py)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext, Options
from torchlint.analysis.patched import patched_forwards
from torchlint.analysis.sync_ops import library_read


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("patched", tmp_path, monkeypatch)


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_the_patched_attention_reads_once_per_layer(project: Path) -> None:
    read = next(f for f in project_findings(project) if f.code == "TL101" and "unpad_input(qkv" in f.message)
    assert "per layer per model call" in read.message and "LlamaAttention.forward()" in read.message


def test_a_forward_no_longer_installed_runs_only_where_the_file_calls_it(project: Path) -> None:
    """Without the patch, only the file's self-test loop calls `forward`: once per iteration, not per layer."""
    patch = project / "flash_patch.py"
    patch.write_text(patch.read_text().replace("    LlamaAttention.forward = forward\n", ""))
    reads = [f for f in project_findings(project) if "unpad_input(qkv" in f.message]
    assert reads and all("patched" not in f.message and "per layer" not in f.message for f in reads)


def test_a_patch_whose_installer_nothing_runs_runs_nowhere(project: Path) -> None:
    """LLaVA's flash-attention patch: `replace_llama_attn_with_flash_attn()` called by no file and
    imported by none. Its forwards run only where the file's self-test calls them (`model_forward`
    nowhere); the patch another file installs keeps its findings (mlp_patch.py: never)."""
    train = project / "train_mem.py"
    train.write_text(train.read_text().replace("from flash_patch import replace_llama_attn_with_flash_attn\n", "")
                     .replace("replace_llama_attn_with_flash_attn()\n", ""))
    findings = project_findings(project)
    assert not [f for f in findings if "patched with `forward()`" in f.message or "model_forward" in f.message]
    assert [f for f in findings if "patched with `norm_forward()`" in f.message and f.impact == "high"]
    assert not [f for f in findings if f.path.endswith("mlp_patch.py")]


def test_a_patch_installed_by_a_call_in_a_function_of_a_torch_file(project: Path) -> None:
    """The installer imported and called in a branch of a function of a file with a full summary:
    the call, resolved, installs it (as train_xformers.py's top-level call does)."""
    (project / "train_mlp.py").write_text("import torch\n\n\ndef main():\n    from mlp_patch import replace_llama_mlp as patch\n"
                                          "    if torch.cuda.is_available():\n        patch()\n")
    findings = project_findings(project)
    assert [f for f in findings if "patched with `mlp_forward()`" in f.message]


def _context(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


@pytest.mark.parametrize(("code", "expected"), [
    ("from flash_attn.bert_padding import unpad_input\nunpad_input(x, mask)\n", "mask"),
    ("import flash_attn.bert_padding as bp\nbp.unpad_input(x, attention_mask=m)\n", "m"),
    ("import torch.nn.functional as F\nF.one_hot(y)\n", "y"),
    ("import torch.nn.functional as F\nF.one_hot(y, num_classes=10)\n", None),
    ("import torch.nn.functional as F\nF.one_hot(y, 10)\n", None),
    ("import torch.nn.functional as F\nF.one_hot(y, **sizes)\n", None),
    ("import torch\ntorch.equal(a, b)\n", "a"),
    ("from flash_attn.bert_padding import pad_input\npad_input(x, idx, b, n)\n", None),
])
def test_which_library_calls_read_and_what(code: str, expected: str | None) -> None:
    ctx = _context(code)
    call = next(iter(ctx.tree.nodes(cst.Call)))
    found = library_read(ctx, call)
    assert (ctx.module.code_for_node(found[0]) if found else None) == expected


@pytest.mark.parametrize(("code", "expected"), [
    ("from transformers import LlamaAttention\ndef f(self, x):\n    return x\nLlamaAttention.forward = f\n", (("f", "LlamaAttention", True, ""),)),
    ("import transformers\ndef f(self, x):\n    return x\ntransformers.models.llama.LlamaModel.forward = f\n", (("f", "LlamaModel", False, ""),)),
    ("from transformers import LlamaAttention\ndef f(self, x):\n    return x\ndef install():\n    LlamaAttention.forward = f\n",
     (("f", "LlamaAttention", True, "install"),)),  # installed where `install()` is called
    ("class Net:\n    def forward(self, x):\n        return x\ndef f(self, x):\n    return x\nNet.forward = f\n", ()),  # its own class
    ("def f(self, x):\n    return x\nmodel.forward = f\n", ()),  # an instance
    ("from transformers import LlamaAttention\nLlamaAttention.forward = make_forward\n", ()),  # no function of this file
])
def test_which_assignments_patch_a_library_forward(code: str, expected: tuple) -> None:  # type: ignore[type-arg]
    ctx = _context(code)
    keys = {id(f): f.name.value for f in ctx.tree.nodes(cst.FunctionDef)}
    assert patched_forwards(ctx, keys) == expected
