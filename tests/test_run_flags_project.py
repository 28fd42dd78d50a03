"""A finding reached only behind a flag of the run that is off by default (a `store_true` option, a
`str2bool` option at `default=False`, parsed in another module: `args = get_args()`) is low, its words
naming the flag: a call made under `if args.gail:`, a method of a class built only there, a keyword or
a position handed the flag (`use_amp=args.use_amp`, `compute_returns(x, args.use_gae)`). It keeps its
tier where the flag is on by default or a file of the project sets it (fixtures/projects/run_flags)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, copied_project, findings_by_line, project_findings

SELECT = ("TL101",)


def test_run_flags_markers_and_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("run_flags", tmp_path, monkeypatch)
    findings = project_findings(root, SELECT)
    assert_markers_hold(root, findings)
    found = {(Path(f.path).as_posix(), f.line): f.impact_reason for f in findings}
    gail = "only when `args.gail` is turned on, a setting of the run that is off by default"
    assert gail in found[("parts/disc.py", 15)] and gail in found[("parts/disc.py", 31)]
    assert gail in found[("parts/disc.py", 27)]  # placed by `warm_up`'s own training loop: its calls decide
    assert "the project passes it only the run's `use_amp` setting, off by default" in found[("parts/engine.py", 7)]
    assert "(it is passed only the run's `use_gae` setting, off by default)" in found[("parts/storage.py", 8)]


@pytest.mark.parametrize(("edit", "line", "impact"), [
    # on by default: the branches run at the defaults
    (("opts.py", ('"--gail", action="store_true"', '"--gail", action="store_false"')), ("parts/disc.py", 15), "medium"),
    (("opts.py", ('"--gail", action="store_true"', '"--gail", action="store_false"')), ("parts/disc.py", 27), "medium"),
    (("opts.py", ('"--use-gae", action="store_true"', '"--use-gae", type=str2bool, default=True')), ("parts/storage.py", 8), "medium"),
    (("opts.py", ('"--use-amp", type=str2bool, default=False', '"--use-amp", type=str2bool, default=True')), ("parts/engine.py", 7), "medium"),
    # the flag off, but a file of the project sets it
    (("train.py", ("    model = torch.nn", "    args.gail = torch.cuda.is_available()\n    model = torch.nn")), ("parts/disc.py", 31), "medium"),
    # a call outside the flag's branch, on an object built there too: `relabel` runs every step
    (("train.py", ("            disc.relabel(x)\n", "        Discriminator(8).relabel(x)\n")), ("parts/disc.py", 31), "medium"),
    # outside the branch, on the object built only behind the flag: its calls decide first, and one has no flag
    (("train.py", ("            disc.relabel(x)\n", "        disc.relabel(x)\n")), ("parts/disc.py", 31), "medium"),
    # `--do-train` around the whole loop is the run's mode (the marker: medium); re-tested in the loop, a part of each step
    (("train.py", ("            monitor.extra(out)\n", "            if args.do_train:\n                monitor.extra(out)\n")),
     ("parts/disc.py", 52), "low"),
    # the class built outside the flag, `update` still called only behind it
    (("train.py", ("    if args.gail:\n        disc = Discriminator(8)\n", "    disc = Discriminator(8)\n")), ("parts/disc.py", 15), "low"),
    # a flag not handed on: the signature's default (True) holds
    (("train.py", ("storage.compute_returns(x, args.use_gae)", "storage.compute_returns(x)")), ("parts/storage.py", 8), "medium"),
])
def test_what_the_flag_defaults_to_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, line, impact) -> None:  # type: ignore[no-untyped-def]
    name, change = edit
    found = findings_by_line(copied_project("run_flags", tmp_path, {name: change}), monkeypatch, SELECT)
    assert found[line].impact == impact, found[line].impact_reason  # type: ignore[attr-defined]
