"""The light summary's one walk (analysis/light.py ``walk``) gives ``ast.walk``'s nodes in its order."""

from __future__ import annotations

import ast
from pathlib import Path

import torchlint
from torchlint.analysis.light import light_summary, walk

_NESTED = '''
import helpers
from .models import Net

def build(kind, n=3):
    if kind:
        model = Net()
        return model
    def inner(x, *, flag=False):
        lst = [y for y in x if y]
        return helpers.run(lst, flag=flag)
    return inner([1, 2], flag=True)

class Trainer:
    def step(self, model, batch):
        out = model(batch)
        self.log(out)
        return out
'''


def test_walk_is_ast_walk_in_order_on_real_sources() -> None:
    sources = [_NESTED, *(p.read_text() for p in sorted(Path(torchlint.__file__).parent.rglob("*.py"))[:40])]
    for text in sources:
        tree = ast.parse(text)
        walked = walk(tree)
        expected = list(ast.walk(tree))
        assert len(walked) == len(expected)
        assert all(a is b for a, b in zip(walked, expected))


def test_light_summary_reads_each_function_from_its_own_walk() -> None:
    summary = light_summary(ast.parse(_NESTED), "/p/m.py")
    assert set(summary.functions) == {"build", "build.inner", "Trainer.step"}
    # the first return breadth first (`return inner(...)`, not the nested `return model`), as `ast.walk` gives them
    assert ("build", (("returned", ("local", "build.inner"), None),)) in summary.returns
    callers = {(c.caller, c.target) for c in summary.calls}
    assert ("build.inner", ("import", 0, "helpers.run")) in callers
    assert ("Trainer.step", ("object", ("passed", "Trainer.step", "model"), "__call__")) in callers
