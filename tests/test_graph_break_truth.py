"""TL504 against dynamo itself: each construct below is compiled by torch on the CPU
(`torch._dynamo.explain`, the eager backend: dynamo's breaks do not depend on the
backend) and checked statically; torchlint flags exactly the ones dynamo breaks on.
What dynamo traces without a break (NumPy conversions, `assert` on a tensor, `min()`
with a tensor, branches on shapes, masked writes) must stay quiet."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_source

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

# (name, body of `def fn(x, mask):` after `y = x.sin()`, does dynamo break the graph?)
CASES = [
    ("item", "return y * y.sum().item()", True),
    ("tolist", "return y.sum(0).tolist()", True),
    ("int", "return y * int(y.sum())", True),
    ("float", "return y * float(y.max())", True),
    ("print", "print('mean', y.mean())\nreturn y", True),
    ("logging", "logging.getLogger('train').info('step')\nreturn y", True),
    ("logger", "logger.warning('step %s', y.shape)\nreturn y.cos()", True),
    ("warn", "warnings.warn('slow')\nreturn y.cos()", True),
    ("timing", "start = time.perf_counter()\nreturn y.cos() * start", True),
    ("math", "return y * math.sqrt(y.abs().sum())", True),
    ("if_tensor", "if y.sum() > 0:\n    y = y * 2\nreturn y", True),
    ("while_tensor", "while y.abs().max() > 1:\n    y = y / 2\nreturn y", True),
    ("ifexp_tensor", "return y * 2 if y.mean() > 0 else y", True),
    ("bool_mask", "return y[y > 0].sum()", True),
    ("nonzero", "return torch.nonzero(y > 0).sum()", True),
    ("unique", "return torch.unique(y.round()).sum()", True),
    ("masked_select", "return y.masked_select(mask).sum()", True),
    ("bincount", "return torch.bincount((y > 0).long().flatten()).sum()", True),
    ("autograd_grad", "xg = x.detach().requires_grad_()\n(g,) = torch.autograd.grad(xg.sin().sum(), xg)\nreturn g + y", True),
    ("where_one_arg", "return torch.where(y > 0)[0].sum()", True),
    ("numpy_roundtrip", "return torch.from_numpy(y.numpy()) + 1", False),
    ("numpy_call", "return y + np.mean(y.numpy())", False),
    ("assert_tensor", "assert y.sum() > -1e9\nreturn y", False),
    ("math_constant", "return y * math.sqrt(2.0)", False),
    ("min_builtin", "return y * min(1.0, y.sum())", False),
    ("shape_branch", "if y.shape[0] > 1 and y.dim() == 2:\n    y = y * 2\nreturn y", False),
    ("none_branch", "if mask is not None:\n    y = y.masked_fill(mask, 0.0)\nreturn y", False),
    ("masked_write", "y[y < 0] = 0\nreturn y", False),
    ("where_three_args", "return torch.where(y > 0, y, 0.0)", False),
    ("flag_off_by_default", "if verbose:\n    print(y.mean())\nreturn y", False),
    ("device_string_branch", "if y.device.type == 'xpu':\n    logger.warning('xpu')\nreturn y", False),
    ("eager_only_print", "if not torch.compiler.is_compiling():\n    print(y.mean())\nreturn y", False),
]


def _source(body: str) -> str:
    return "import logging\nimport math\nimport time\nimport warnings\n\nimport numpy as np\nimport torch\n\nlogger = logging.getLogger(__name__)\n\n\n@torch.compile\ndef fn(x, mask, verbose=False):\n    y = x.sin()\n" + textwrap.indent(body, "    ") + "\n"


def _dynamo_breaks(source: str) -> int:
    namespace: dict[str, object] = {}
    exec(compile(source.replace("@torch.compile\n", ""), "<case>", "exec"), namespace)
    torch._dynamo.reset()
    x = torch.randn(8, 4)
    # every break has a reason; `graph_break_count` misses one after which no graph follows
    return len(torch._dynamo.explain(namespace["fn"])(x, x > 0).break_reasons)


@pytest.mark.parametrize(("name", "body", "breaks"), CASES, ids=[c[0] for c in CASES])
def test_tl504_agrees_with_dynamo(name: str, body: str, breaks: bool) -> None:
    source = _source(body)
    assert (_dynamo_breaks(source) > 0) is breaks, f"{name}: the case's label disagrees with dynamo {torch.__version__}"
    findings = [f for f in lint_source(source, "case.py", from_table({"select": ["TL504"]}, Path("."))) if f.code == "TL504"]
    assert bool(findings) is breaks, f"{name}: dynamo {'breaks' if breaks else 'does not break'}, TL504 found {[f.message for f in findings]}"
