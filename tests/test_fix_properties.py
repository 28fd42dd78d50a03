"""Property tests: on generated programs, --fix always yields valid Python, removes the
findings it claims to fix, and a second --fix changes nothing."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchlint import catalogue
from torchlint.config import from_table
from torchlint.engine import lint_paths

# Fixable patterns (rule code, statement template); {v} is a variable name, {n} a size,
# {c} a trailing comment. Templates of rules that are not registered are skipped.
TEMPLATES = [
    ("TL303", "optimizer.zero_grad(set_to_none=False){c}"),
    ("TL303", "model.zero_grad(\n    set_to_none=False,{c}\n)"),
    ("TL502", "scaler = torch.cuda.amp.GradScaler(){c}"),
    ("TL502", "with torch.cuda.amp.autocast():{c}\n    {v} = model({v})"),
    ("TL110", "{v} = torch.zeros({n}, {n}).to(device){c}"),
    ("TL110", "{v} = torch.randn(({n}, {n})).cuda(){c}"),
    ("TL111", "for x, y in train_loader:\n    x = x.to(device){c}\n    model(x).sum().backward()"),
    ("TL203", "{v} = torch.tensor(np.zeros({n})){c}"),
    ("TL204", "{v} = torch.FloatTensor([1.0, 2.0]){c}"),
    ("TL204", "{v} = Variable(torch.ones({n})){c}"),
    ("TL401", "net = nn.Sequential(nn.Conv2d({n}, {n}, 3), nn.BatchNorm2d({n})){c}"),
]
HEADER = (
    "import numpy as np\nimport torch\nimport torch.nn as nn\nfrom torch.autograd import Variable\n"
    "from torch.utils.data import DataLoader\n\n"
    "device = torch.device('cuda')\nmodel = nn.Linear(64, 64).to(device)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "train_loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)\n\n"
)
KNOWN = {rule.code for rule in catalogue.rules()}
USABLE = [t for t in TEMPLATES if t[0] in KNOWN]

names = st.sampled_from(["x", "buf", "weights", "t0", "_tmp"])
sizes = st.sampled_from(["64", "128", "256"])
comments = st.sampled_from(["", "  # keep", "  # noqa-free note", "\t# tab comment"])


@st.composite
def programs(draw: st.DrawFn) -> str:
    count = draw(st.integers(min_value=1, max_value=5))
    blocks = []
    for _ in range(count):
        _, template = draw(st.sampled_from(USABLE))
        statement = template.format(v=draw(names), n=draw(sizes), c=draw(comments))
        if draw(st.booleans()):  # also inside a function body
            statement = "def f():\n" + "\n".join("    " + line for line in statement.splitlines()) + "\n    return None"
        blocks.append(statement + "\n" + draw(st.sampled_from(["", "\n", "\n\n"])))
    return HEADER + "".join(blocks)


def _fix(path: Path, unsafe: bool) -> str:
    config = from_table({"select": ["ALL"]}, path.parent)
    result = lint_paths([path], config, fix="unsafe" if unsafe else "safe")
    for edit in result.edits:
        path.write_text(edit.after, encoding="utf-8")
    return path.read_text(encoding="utf-8")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=programs(), unsafe=st.booleans())
def test_fix_is_valid_and_idempotent(program: str, unsafe: bool, tmp_path: Path) -> None:
    path = tmp_path / "generated.py"
    path.write_text(program, encoding="utf-8")
    once = _fix(path, unsafe)
    cst.parse_module(once)
    compile(once, "generated.py", "exec")
    # A second --fix: one run both ways (a third on the same text and settings, as this
    # test made, found what the second found)
    config = from_table({"select": ["ALL"]}, tmp_path)
    again = lint_paths([path], config, fix="unsafe" if unsafe else "safe")
    assert all(edit.after == once for edit in again.edits), "a second --fix changed the code"
    assert not again.edits, "fixable findings remain after --fix"
