"""Generated inputs through `check` and `check --fix`: random valid Python (hypothesmith's
grammar-based programs, with torch code that the fixes rewrite mixed in) and random bytes.

Whatever the input: no traceback, exit code 0, 1 or 2, a fixed file still compiles, and
a second `--fix` changes nothing. Kept to ~20 s with ``max_examples``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from torchlint.cli import main

try:
    import hypothesmith
except ImportError:  # pragma: no cover - the test extra installs it
    hypothesmith = None

# Lines the fixes rewrite (TL110, TL111, TL204, TL303, TL502...), some with comments.
TORCH_LINES = [
    "x = torch.zeros(3).cuda()",
    "y = torch.ones(  # size\n    2,  # two\n).to(device)",
    "z = (torch.randn(4)  # made\n     .cuda())",
    "w = torch.tensor([1.0, 2.0]).cuda(non_blocking=True)",
    "v = Variable(torch.randn(3))",
    "u = torch.FloatTensor([1.0])",
    "with torch.cuda.amp.autocast():\n    pass",
    "scaler = torch.cuda.amp.GradScaler()",
    "for a, b in loader:\n    a = a.to(device)\n    loss = model(a).sum()\n    loss.backward()\n    total += loss.item()",
    "optimizer.zero_grad(set_to_none=False)",
    "t = torch.zeros(3, out=buf).cuda()",
]
HEADER = "import torch\nfrom torch.autograd import Variable\n"
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # generated code may warn on compile
SETTINGS = settings(
    max_examples=int(os.environ.get("TORCHLINT_GENERATED_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def _grammar_programs() -> st.SearchStrategy[str]:
    """Valid Python: hypothesmith's grammar-based programs, or a small grammar of our own."""
    if hypothesmith is not None:
        return hypothesmith.from_grammar()
    names = st.sampled_from(["a", "b", "x", "model", "loader"])
    atoms = st.one_of(names, st.integers(-5, 99).map(str), st.just("None"), st.just("'s'"))
    expressions = st.recursive(atoms, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "*", "-", "and", "<"]), inner).map(" ".join),
        st.tuples(names, st.lists(inner, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
    ), max_leaves=8)
    statements = st.one_of(
        st.tuples(names, expressions).map(lambda t: f"{t[0]} = {t[1]}"),
        expressions.map(lambda e: f"if {e}:\n    pass"),
    )
    return st.lists(statements, max_size=6).map(lambda lines: "\n".join(lines) + "\n")


def programs() -> st.SearchStrategy[str]:
    """A generated program with torch lines interleaved at random places."""
    return st.tuples(
        _grammar_programs(), st.lists(st.sampled_from(TORCH_LINES), max_size=4), st.randoms(use_true_random=False)
    ).map(_interleave)


def _interleave(parts: tuple) -> str:  # type: ignore[type-arg]
    program, extra, random = parts
    try:
        compile(program, "g.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        program = ""  # a generated program this Python rejects: use the torch lines alone
    blocks = [program.rstrip("\n")] if program.strip() else []
    for line in extra:
        blocks.insert(random.randint(0, len(blocks)), line)
    return HEADER + "\n".join(blocks) + "\n"


def _check(directory: Path, *args: str) -> int:
    old = Path.cwd()
    os.chdir(directory)
    try:
        result = CliRunner().invoke(main, ["check", "--output-format", "json", *args, "g.py"])
    finally:
        os.chdir(old)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback would have reached the user
    assert "Traceback" not in result.stderr, result.stderr
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr)
    return result.exit_code


@pytest.mark.slow
@SETTINGS
@given(programs())
def test_valid_python_checks_and_fixes_cleanly(source: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work)
        path = directory / "g.py"
        path.write_text(source, encoding="utf-8")
        try:  # as Python reads the file (bytes, its own line breaks), not as the str was
            compile(path.read_bytes(), "g.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            assume(False)  # interleaving the torch lines made it invalid: not a valid input
        _check(directory)
        _check(directory, "--fix", "--unsafe-fixes", "--select", "ALL")
        fixed = path.read_bytes()
        compile(fixed, "g.py", "exec", dont_inherit=True)  # the fixes kept it valid
        _check(directory, "--fix", "--unsafe-fixes", "--select", "ALL")
        assert path.read_bytes() == fixed  # a second --fix changes nothing


@pytest.mark.slow
@SETTINGS
@given(st.one_of(st.binary(max_size=400), st.binary(max_size=200).map(lambda b: HEADER.encode() + b)))
def test_random_bytes_never_crash(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work)
        (directory / "g.py").write_bytes(data)
        _check(directory)
        _check(directory, "--fix")
        after = (directory / "g.py").read_bytes()
        if after != data:  # only a file Python could read is ever fixed, and it stays valid
            compile(after, "g.py", "exec", dont_inherit=True)
