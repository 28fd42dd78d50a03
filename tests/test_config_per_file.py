"""Each file is checked with its own nearest configuration (issue #11), as ruff does:
a monorepo whose packages select different rules, ignore different rules per file and
exclude different paths gives the same report whatever the order of the paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import LOOP_WITH_FINDINGS, run_check
from torchlint import config as config_module
from torchlint.config import ConfigError, Resolver, load_config
from torchlint.engine import lint_paths

# One line each of TL101 (`.item()` in a step loop) and TL303 (zero_grad(set_to_none=False)).
SYNC_LOOP = "import torch\nfor x in loader:\n    print(model(x).item())\n"


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def monorepo(tmp_path: Path) -> Path:
    """Package a: TL101 and TL303, TL101 off in its scripts/, its /generated excluded
    (anchored at a's directory). Package b (torchlint.toml): TL303 only, nothing excluded."""
    return _write(tmp_path / "repo", {
        "pyproject.toml": '[tool.torchlint]\nselect = ["TL101"]\n',
        "packages/a/pyproject.toml": (
            '[tool.torchlint]\nselect = ["TL101", "TL303"]\n'
            'per-file-ignores = { "scripts/*" = ["TL101"] }\nexclude = ["/generated"]\n'
        ),
        "packages/a/train.py": LOOP_WITH_FINDINGS,
        "packages/a/scripts/loop.py": SYNC_LOOP,
        "packages/a/generated/gen.py": LOOP_WITH_FINDINGS,
        "packages/b/torchlint.toml": 'select = ["TL303"]\n',
        "packages/b/train.py": LOOP_WITH_FINDINGS,
        "packages/b/scripts/loop.py": SYNC_LOOP,
        "packages/b/generated/gen.py": LOOP_WITH_FINDINGS,
        "top.py": SYNC_LOOP,
    })


def _codes_by_file(stdout: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if ": TL" in line:
            path, rest = line.split(":", 1)
            found.setdefault(path, []).append(rest.split(": ", 1)[1].split()[0])
    return {path: sorted(codes) for path, codes in found.items()}


EXPECTED = {
    "packages/a/train.py": ["TL101", "TL303"],
    "packages/b/generated/gen.py": ["TL303"],
    "packages/b/train.py": ["TL303"],
    "top.py": ["TL101"],
}


def test_each_file_has_its_own_config_whatever_the_order(monorepo: Path) -> None:
    forward = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", "packages/a", "packages/b", "top.py")
    backward = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", "top.py", "packages/b", "packages/a")
    assert forward == backward
    assert forward[0] == 1
    assert _codes_by_file(forward[1]) == EXPECTED


def test_files_named_one_by_one_in_either_order(monorepo: Path) -> None:
    files = ["packages/a/train.py", "packages/b/train.py", "packages/a/scripts/loop.py"]
    forward = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", *files)
    backward = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", *reversed(files))
    assert forward == backward
    assert _codes_by_file(forward[1]) == {"packages/a/train.py": ["TL101", "TL303"], "packages/b/train.py": ["TL303"]}


def test_worker_processes_check_each_file_with_its_config(monorepo: Path) -> None:
    for index in range(5):  # enough files for a pool
        _write(monorepo, {f"packages/a/more{index}.py": SYNC_LOOP, f"packages/b/more{index}.py": SYNC_LOOP})
    in_pool = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", "--jobs", "2", ".")
    in_process = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", "--jobs", "1", ".")
    assert in_pool == in_process
    found = _codes_by_file(in_pool[1])
    assert all(found[f"packages/a/more{i}.py"] == ["TL101"] for i in range(5))
    assert not any(name.startswith("packages/b/more") for name in found)  # TL303 only there


def test_the_cache_keys_each_file_by_its_own_config(monorepo: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    first = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--cache-dir", cache, ".")
    assert _codes_by_file(first[1]) == EXPECTED
    (monorepo / "packages/b/torchlint.toml").write_text('select = ["TL101"]\n')
    found = _codes_by_file(run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--cache-dir", cache, ".")[1])
    assert found["packages/b/train.py"] == ["TL101"] and found["packages/b/scripts/loop.py"] == ["TL101"]
    assert found["packages/a/train.py"] == ["TL101", "TL303"]  # a's config did not change


def test_command_line_options_override_every_files_config(monorepo: Path) -> None:
    code, out, _ = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", "--select", "TL303", ".")
    assert code == 1
    assert set(_codes_by_file(out)) == {"packages/a/train.py", "packages/b/train.py", "packages/b/generated/gen.py"}
    assert {c for codes in _codes_by_file(out).values() for c in codes} == {"TL303"}


def test_config_forces_one_file_for_all(monorepo: Path) -> None:
    code, out, _ = run_check(monorepo, "--min-impact", "low", "--output-format", "concise", "--no-cache", "--config", "packages/b/torchlint.toml", "packages/a")
    assert code == 1
    # a's own config is not read: its selection, nor its exclude of /generated
    assert _codes_by_file(out) == {"packages/a/train.py": ["TL303"], "packages/a/generated/gen.py": ["TL303"]}


def test_show_files_lists_what_would_be_checked(monorepo: Path) -> None:
    code, out, err = run_check(monorepo, "--show-files", "packages/b", "packages/a")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "packages/a/scripts/loop.py", "packages/a/train.py",
        "packages/b/generated/gen.py", "packages/b/scripts/loop.py", "packages/b/train.py",
    ]


def test_show_settings_names_the_config_file_and_the_rules(monorepo: Path) -> None:
    code, out, _ = run_check(monorepo, "--show-settings", "packages/a/scripts/loop.py")
    assert code == 0
    lines = out.splitlines()
    assert f"Config file: {monorepo / 'packages/a/pyproject.toml'}" in lines
    assert 'select = ["TL101", "TL303"]' in lines
    assert 'per-file-ignores = {"scripts/*" = ["TL101"]}' in lines
    assert 'rules = ["TL303"]' in lines  # TL101 is ignored in a's scripts/
    code, out, _ = run_check(monorepo, "--show-settings", "packages/b/train.py", "--ignore", "TL303")
    assert code == 0
    assert f"Config file: {monorepo / 'packages/b/torchlint.toml'}" in out.splitlines()
    assert "rules = []" in out.splitlines()


def test_torchlint_toml_wins_over_pyproject_in_one_directory(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "pyproject.toml": '[tool.torchlint]\nselect = ["TL101"]\n',
        "torchlint.toml": 'select = ["TL303"]\n',
        "train.py": LOOP_WITH_FINDINGS,
    })
    code, out, _ = run_check(root, "--min-impact", "low", "--output-format", "concise", "--no-cache", ".")
    assert code == 1 and _codes_by_file(out) == {"train.py": ["TL303"]}
    (root / ".torchlint.toml").write_text('select = ["TL101"]\n')  # the dotted name wins over both
    assert f"Config file: {root / '.torchlint.toml'}" in run_check(root, "--show-settings", "train.py")[1]


def test_a_pyproject_without_a_torchlint_table_is_passed_over(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "torchlint.toml": 'select = ["TL303"]\n',
        "pkg/pyproject.toml": '[project]\nname = "pkg"\n',
        "pkg/train.py": LOOP_WITH_FINDINGS,
    })
    assert f"Config file: {root / 'torchlint.toml'}" in run_check(root, "--show-settings", "pkg/train.py")[1]


def test_extend_inherits_and_the_extending_files_keys_win(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "shared/base.toml": 'select = ["TL101"]\ntensor-core-multiple = 64\n',
        "pkg/torchlint.toml": 'extend = "../shared/base.toml"\nselect = ["TL303"]\n',
        "pkg/train.py": LOOP_WITH_FINDINGS,
    })
    code, out, _ = run_check(root, "--show-settings", "pkg/train.py")
    assert code == 0
    lines = out.splitlines()
    assert f"Extends: {root / 'shared/base.toml'}" in lines
    assert 'select = ["TL303"]' in lines and "tensor-core-multiple = 64" in lines
    code, out, _ = run_check(root, "--min-impact", "low", "--output-format", "concise", "--no-cache", "pkg")
    assert code == 1 and _codes_by_file(out) == {"pkg/train.py": ["TL303"]}


def test_an_extend_cycle_is_a_configuration_error(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "torchlint.toml": 'extend = "other.toml"\n',
        "other.toml": 'extend = "torchlint.toml"\n',
        "train.py": SYNC_LOOP,
    })
    code, out, err = run_check(root, "--min-impact", "low", "--no-cache", ".")
    assert code == 2 and out == ""
    assert "cycle" in err and "other.toml" in err and "Traceback" not in err


def test_extend_of_a_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    root = _write(tmp_path, {"torchlint.toml": 'extend = "nowhere.toml"\n', "train.py": SYNC_LOOP})
    code, _, err = run_check(root, "--min-impact", "low", "--no-cache", ".")
    assert code == 2 and "config file not found" in err and "nowhere.toml" in err


def test_isolated_reads_no_config_file(tmp_path: Path) -> None:
    root = _write(tmp_path, {"torchlint.toml": 'select = ["TL303"]\n', "train.py": SYNC_LOOP})
    assert run_check(root, "--no-cache", "--output-format", "concise", ".")[0] == 0  # TL303 only: nothing
    code, out, _ = run_check(root, "--no-cache", "--output-format", "concise", "--isolated", ".")
    assert code == 1 and _codes_by_file(out) == {"train.py": ["TL101"]}
    (root / "torchlint.toml").write_text("select = [\n")  # not even read
    assert run_check(root, "--no-cache", "--isolated", ".")[0] == 1
    assert "Config file: (none: the defaults)" in run_check(root, "--isolated", "--show-settings", "train.py")[1]


@pytest.mark.parametrize("name", ["torchlint.toml", ".torchlint.toml", "pyproject.toml"])
def test_invalid_toml_on_the_config_path_is_exit_2(tmp_path: Path, name: str) -> None:
    root = _write(tmp_path, {f"pkg/{name}": "select = [\n", "pkg/train.py": SYNC_LOOP, "other/ok.py": SYNC_LOOP})
    code, out, err = run_check(root, "--no-cache", "--output-format", "concise", "other", "pkg")
    # the broken project is left out and said; the other one is still checked
    assert code == 2 and _codes_by_file(out) == {"other/ok.py": ["TL101"]}
    assert f"cannot read {root / 'pkg' / name}" in err and "Traceback" not in err


def test_lint_paths_takes_a_resolver(monorepo: Path) -> None:
    result = lint_paths([monorepo / "packages"], Resolver(cwd=monorepo))
    assert sorted(f.code for f in result.findings if f.path.endswith("b/train.py")) == ["TL303"]
    assert sorted(f.code for f in result.findings if f.path.endswith("a/train.py")) == ["TL101", "TL303"]
    assert result.files_checked == 5  # a's /generated is excluded by a's own config


def test_lookups_are_cached_per_directory(monorepo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Path] = []
    real_lookup = config_module.config_file_in

    def counting(directory: Path) -> Path | None:
        asked.append(directory)
        return real_lookup(directory)

    monkeypatch.setattr(config_module, "config_file_in", counting)
    resolver = Resolver(cwd=monorepo)
    for name in ("train.py", "scripts/loop.py", "generated/gen.py", "train.py"):
        assert resolver.for_path(monorepo / "packages/a" / name).source == monorepo / "packages/a/pyproject.toml"
    assert resolver.for_path(monorepo / "packages/b/scripts/loop.py").source == monorepo / "packages/b/torchlint.toml"
    assert len(asked) == len(set(asked))  # no directory was looked at twice
    assert resolver.for_path(monorepo / "packages/a/train.py") is resolver.for_path(monorepo / "packages/a/scripts/loop.py")


def test_a_bad_key_in_a_config_below_is_reported(tmp_path: Path) -> None:
    root = _write(tmp_path, {"pkg/torchlint.toml": 'selct = ["TL101"]\n', "pkg/train.py": SYNC_LOOP})
    resolver = Resolver(cwd=root)
    # the project is left out (excluded from every walk) and the reason kept for the run to say
    assert resolver.for_path(root / "pkg/train.py").broken is not None
    assert "did you mean `select`" in resolver.broken[root / "pkg" / "torchlint.toml"]
    with pytest.raises(ConfigError, match="did you mean `select`"):
        load_config(root / "pkg")  # the one config asked for: an error


def test_a_misspelt_extend_is_named(tmp_path: Path) -> None:
    root = _write(tmp_path, {"torchlint.toml": 'extends = "base.toml"\n', "train.py": SYNC_LOOP})
    code, _, err = run_check(root, "--min-impact", "low", "--no-cache", ".")
    assert code == 2 and "unknown configuration key `extends`" in err and "did you mean `extend`?" in err
    (root / "torchlint.toml").write_text("extend = 3\n")
    code, _, err = run_check(root, "--min-impact", "low", "--no-cache", ".")
    assert code == 2 and "`extend` in" in err and "must be the path of a config file" in err
