"""The deferred-sync variant of TL101/TL102 (experiment/deferred.py, profiler/deferred.py).

The rewrite is checked on source (what it changes, what it refuses and why), and its
meaning on the CPU: the original and the variant, run with the window's builtins, print
the same thing. The CPU only shows that the variant computes what the original does; how
much it saves needs a GPU (the GPU kit measures it, benchmarks/gpu_check.py).
"""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import pytest

from torchlint.config import Config
from torchlint.engine import Linter
from torchlint.engine.source import read_source
from torchlint.experiment.plan import candidates_for
from torchlint.experiment.variants import VariantError, make_variant

HEAD = """\
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Linear(4, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def variant_of(tmp_path: Path, body: str, code: str = "TL101", nth: int = 0):
    path = tmp_path / "train.py"
    path.write_text(HEAD + textwrap.dedent(body))
    found = [f for f in Linter(Config(), debug=False).lint(read_source(path, str(path)), path).findings if f.code == code]
    assert found, f"no {code} in the script"
    return path, make_variant(found[nth], tmp_path / "variant")


LOOP = """\
for step in range(6):
    x = torch.randn(8, 4, device=device)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def run(path: Path) -> str:
    from torchlint.profiler import deferred

    deferred.install()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(path.read_text(), str(path), "exec"), {"__name__": "__main__"})
    return out.getvalue()


def test_an_accumulated_value_stays_on_the_device_and_every_read_is_wrapped(tmp_path):
    body = ("total = 0.0\n\n\ndef report():\n    print(f\"mean {total / 6:.5f}\")\n\n\n"
            + LOOP + "    total += loss.item() * x.size(0)\nreport()\n")
    _, v = variant_of(tmp_path, body)
    assert "total += loss.detach() * x.size(0)" in v.after
    assert 'print(f"mean {__torchlint_read__(total) / 6:.5f}")' in v.after
    assert v.description.startswith("mechanical: accumulated")
    assert v.summary() == "`total += loss.detach() * x.size(0)` at train.py:21"  # the finding's change, not the first


def test_an_appended_value_and_the_reads_of_the_list(tmp_path):
    body = LOOP + """\
    losses.append(loss.item())
    if len(losses) % 3 == 0:
        print(sum(losses[-3:]) / 3)
print(len(losses), max(losses))
"""
    _, v = variant_of(tmp_path, "losses = []\n" + body)
    assert "losses.append(loss.detach())" in v.after
    assert "if len(losses) % 3 == 0:" in v.after  # the count reads no value: no sync added
    assert "sum(__torchlint_read__(losses)[-3:])" in v.after
    assert "print(len(losses), max(__torchlint_read__(losses)))" in v.after


def test_tl102_keeps_the_tensor_and_reads_it_with_cpu(tmp_path):
    body = "preds = []\n" + LOOP + "    preds.append(model(x).argmax(1).cpu())\nprint(torch.cat(preds).tolist())\n"
    _, v = variant_of(tmp_path, body, code="TL102")
    assert "preds.append(model(x).argmax(1))" in v.after
    assert "torch.cat(__torchlint_read_cpu__(preds))" in v.after


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (LOOP + '    print(f"loss {loss.item():.4f}")\n', "the sync is needed there"),
        ("class S:\n    total = 0.0\ns = S()\n" + LOOP + "    s.total += loss.item()\n", "attribute or an item"),
        ("total = 1.0\n" + LOOP + "    total += loss.item()\n    total *= 0.5\n", "AugAssign"),
        ("losses = []\nh = losses\n" + LOOP + "    losses.append(loss.item())\n", "aliased"),
        ("losses = []\n" + LOOP + "    losses.append(loss.item())\n    losses.append(0.0)\n", "adds values"),
        ("losses, old = [], []\n" + LOOP + "    losses.append(loss.item())\nold.append(losses)\n", "another container"),
        ("def f(total):\n" + textwrap.indent(LOOP, "    ") + "        total += loss.item()\n    return total\n", "Param"),
    ],
)
def test_refused_where_a_read_could_not_be_made_sound(tmp_path, body, why):
    with pytest.raises(VariantError, match=why):
        variant_of(tmp_path, body)


def test_the_variant_prints_what_the_original_prints(tmp_path):
    pytest.importorskip("torch")
    body = ("total, correct = 0.0, 0\nlosses = []\n\n\ndef summary():\n"
            "    return f\"{total:.6f} {correct} {len(losses)} {sum(losses):.6f}\"\n\n\n"
            + LOOP + "    total += loss.item()\n    correct += (model(x).argmax(1) == 0).sum().item()\n"
            "    losses.append(loss.item())\nprint(summary())\n")
    original, v = variant_of(tmp_path, body)
    _, v2 = variant_of(tmp_path, body, nth=1)
    _, v3 = variant_of(tmp_path, body, nth=2)
    expected = run(original)
    assert expected.count(" ") == 3
    for variant in (v, v2, v3):  # the float accumulated on the device (fp32) agrees to 6 places here
        assert run(Path(variant.copy)) == expected
    assert "correct += (model(x).argmax(1) == 0).sum().detach()" in v2.after  # an int count stays an int


def test_the_experiment_plans_tl101_as_a_source_variant_on_cuda_only(tmp_path):
    path, _ = variant_of(tmp_path, "total = 0.0\n" + LOOP + "    total += loss.item()\n")
    finding = [f for f in Linter(Config(), debug=False).lint(read_source(path, str(path)), path).findings
               if f.code == "TL101"][0]
    (cpu,) = candidates_for(finding, cuda=False, cores=2)
    assert cpu.skip and "CUDA" in cpu.skip
    (gpu,) = candidates_for(finding, cuda=True, cores=2)
    assert gpu.kind == "source" and gpu.skip is None
