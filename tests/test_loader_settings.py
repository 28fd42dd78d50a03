"""TL201 reads a setting's default where the config object comes from (review 5, dlrm):
`DataLoader(..., num_workers=args.num_workers)` in a builder another file calls with the
namespace of its parser, whose `--num-workers` defaults to 0. The default travels as plain
data in each file's summary (`FileSummary.settings`), the join finds the callers."""

from __future__ import annotations

from pathlib import Path

from conftest import copied_project, expected_impacts, expected_markers
from torchlint.config import from_table
from torchlint.engine import lint_paths


def _lint(root: Path, paths: list[Path] | None = None, cache: Path | None = None, project: bool = False):  # type: ignore[no-untyped-def]
    result = lint_paths(paths or [root], from_table({"select": ["TL201"], "min-impact": "low"}, root), cache=cache, project=project)
    assert not result.errors
    return result.findings


def _expected(root: Path, names: tuple[str, ...]) -> tuple[set[tuple[str, int, str]], dict[tuple[str, int, str], str]]:
    markers, impacts = set(), {}
    for name in names:
        text = (root / name).read_text()
        markers |= {(name, line, code) for line, code in expected_markers(text)}
        impacts |= {(name, line, code): impact for (line, code), impact in expected_impacts(text).items()}
    return markers, impacts


_FILES = ("loaders.py", "trainer.py", "train.py", "sweep.py", "stream.py", "options.py", "graph_loaders.py", "defaults.py", "tuning.py")


def test_a_setting_parsed_in_the_callers_file_sets_the_loaders_finding(tmp_path: Path) -> None:
    root = copied_project("loader_settings", tmp_path)
    found = _lint(root)
    markers, impacts = _expected(root, _FILES)
    assert {(Path(f.location.path).name, f.line, f.code) for f in found} == markers
    assert {(Path(f.location.path).name, f.line, f.code): f.impact for f in found} == impacts
    handed = next(f for f in found if f.line == 29)
    assert "`num_workers=cfg.num_workers`, 0 by default" in handed.message


def test_a_caller_that_sets_workers_keeps_the_loader_quiet(tmp_path: Path) -> None:
    root = copied_project("loader_settings", tmp_path)
    train = root / "train.py"
    train.write_text(train.read_text().replace('"--num-workers", type=int, default=0', '"--num-workers", type=int, default=6'))
    lines = {(Path(f.location.path).name, f.line) for f in _lint(root)}
    assert ("loaders.py", 18) not in lines and ("loaders.py", 29) not in lines and ("trainer.py", 13) not in lines
    assert ("loaders.py", 38) in lines  # options.py's own setting, still 0


def test_cached_results_and_one_file_settle_the_same(tmp_path: Path) -> None:
    root = copied_project("loader_settings", tmp_path)
    first = {(f.line, f.impact, f.message) for f in _lint(root, cache=tmp_path / "cache")}
    again = {(f.line, f.impact, f.message) for f in _lint(root, cache=tmp_path / "cache")}
    assert first == again
    (root / "pyproject.toml").write_text("[tool.torchlint]\n")
    alone = _lint(root, [root / "loaders.py"], project=True)
    assert {f.line for f in alone} == {18, 29, 38}


def test_a_config_object_imported_from_the_project_holds_what_the_project_assigns_it(tmp_path: Path) -> None:
    """GraphGym (review 15): ``from graphgym.config import cfg`` and ``num_workers=cfg.num_workers``, where
    yacs' ``set_cfg(cfg)`` assigns ``cfg.num_workers = 0``, in a config module without torch (the light
    summary's ``FileSummary.assigned``). A setting another file assigns from the machine, or that another
    file's parser defaults otherwise, is the run's choice."""
    root = copied_project("loader_settings", tmp_path)
    lines = {(Path(f.location.path).name, f.line) for f in _lint(root)}
    assert ("graph_loaders.py", 9) in lines and ("graph_loaders.py", 11) not in lines and ("graph_loaders.py", 13) not in lines
    (root / "tuning.py").unlink()  # nothing sets `cache_workers` but `set_cfg`: 0 in every run
    lines = {(Path(f.location.path).name, f.line) for f in _lint(root)}
    assert ("graph_loaders.py", 13) in lines
    defaults = root / "defaults.py"
    defaults.write_text(defaults.read_text().replace("cfg.num_workers = 0", "cfg.num_workers = 4"))
    lines = {(Path(f.location.path).name, f.line) for f in _lint(root)}
    assert ("graph_loaders.py", 9) not in lines
