"""profile.prof keeps the program's call tree (issue 28).

One script (fixtures/scripts/tiny_transformer.py: nested modules, a DataLoader, a step
helper, an evaluation helper) is profiled twice: by ``torchlint profile`` and by a plain
cProfile run (torch and torch._dynamo imported first, as torchlint does before the
script). Every function's calls and callers must be the same, and its share of
``main()``'s time must agree within noise; torchlint's own frames must be gone and the
tree must add up. Before the fix ``_call_impl`` had a cumulative time of 0 and the
model's forward hung unconnected. The runs are shared with tests/test_line_costs.py.
"""

from __future__ import annotations

import re

import pytest

from conftest import TREE_SCRIPT
from torchlint.profiler.cprof import user_view
from torchlint.profiler.usercode import _TORCHLINT_DIR

NAME = TREE_SCRIPT  # the run is conftest's ``both`` fixture, shared with test_line_costs and others


def _main(stats: dict) -> float:
    (ct,) = [v[3] for k, v in stats.items() if k[2] == "main" and k[0].endswith(NAME)]
    return ct


def _user(key: tuple) -> bool:
    return str(key[0]).endswith(NAME)


def test_no_torchlint_frame_is_left(both):
    assert [k for k in both.ours if str(k[0]).startswith(_TORCHLINT_DIR) or "torchlint" in str(k[2])] == []


def test_every_user_function_has_the_same_calls_and_callers(both):
    for key, (cc, nc, _tt, _ct, callers) in both.plain.items():
        if not _user(key):
            continue
        assert key in both.ours, key
        ours = both.ours[key]
        assert ours[1] == nc, key
        assert {c: e[1] for c, e in ours[4].items()} == {c: e[1] for c, e in callers.items()}, key


def test_cumulative_times_agree_with_plain_cprofile(both):
    """Every function with 5 % of main() or more, in torch's files too (_call_impl,
    backward, the optimizer step): the same calls and the same share, within noise (the
    share of one of two plain runs: a stall of a shared machine, as a first torch.randint
    that once took 28 % of main(), hits one run, not the tree)."""
    main_ours = _main(both.ours)
    checked = []
    for key, (_cc, nc, _tt, ct, _callers) in both.plain.items():
        if ct < 0.05 * _main(both.plain) or key[2] in ("run_path", "_run_module_code", "_run_code") or key[0] == "~" and "exec" in key[2]:
            continue
        assert key in both.ours, key
        ours = both.ours[key]
        assert ours[1] == nc, key
        shares = [p[key][3] / _main(p) for p in both.plains if key in p]
        # 0.3: torch.profiler records every op in its windows (6 of this run's 16 steps),
        # which weighs on backward's many small ops: 0.58-0.64 against 0.40-0.44 seen at a
        # load of 3-4 on 2 cores. The broken tree this guards against read 0.0 for
        # `_call_impl` against 0.4 and more.
        assert min(abs(ours[3] / main_ours - s) for s in shares) <= 0.3, (key, ours[3] / main_ours, shares)
        checked.append(key[2])
    assert {"_call_impl", "train_epoch", "evaluate", "forward", "backward"} <= set(checked)


def test_the_tree_adds_up(both):
    """A function's callers account for its time, and its time for its own and its
    callees' (where it does not recurse: cProfile counts a recursive one once)."""
    stats = both.ours
    main = _main(stats)
    callees: dict = {}
    for key, (_cc, _nc, _tt, _ct, callers) in stats.items():
        for caller, edge in callers.items():
            if caller != key:
                callees[caller] = callees.get(caller, 0.0) + edge[3]
    for key, (cc, nc, tt, ct, callers) in stats.items():
        if cc != nc or ct < 0.01 * main:
            continue
        if callers:
            assert sum(e[3] for e in callers.values()) == pytest.approx(ct, rel=0.01, abs=1e-4), key
        assert tt + callees.get(key, 0.0) == pytest.approx(ct, rel=0.02, abs=2e-3), key


def _c_names(stats: dict) -> set[str]:
    """The C calls' names, without the addresses cProfile puts in some of them."""
    return {re.sub(r" at 0x[0-9a-f]+", "", k[2]) for k in stats if k[0] == "~"}


def test_c_calls_have_plain_cprofiles_names_and_slots_are_not_calls(both):
    """A probed method is named as plain cProfile names it (not ``<function
    TensorBase.item at 0x...>``), with its calls; a probed slot (``if t:``, ``float(t)``),
    which plain cProfile never lists, is not listed; nothing else is new."""
    item = ("~", 0, "<method 'item' of 'torch._C.TensorBase' objects>")
    assert item in both.ours and both.ours[item][1] == both.plain[item][1] > 0
    assert not any("TensorBase" in k[2] and k[2].startswith("<function") for k in both.ours)
    plain_names = set().union(*(_c_names(p) for p in both.plains))
    # the one call torchlint's module hooks add: _call_impl's hook path reads the hook dicts
    hooks = {"<method 'items' of 'collections.OrderedDict' objects>"}
    assert _c_names(both.ours) - plain_names - hooks == set()


def test_the_script_is_named_as_the_user_typed_it(both):
    """``torchlint profile tiny_transformer.py``: its functions under that path, as
    ``python -m cProfile tiny_transformer.py`` names them (its imports stay absolute)."""
    mains = [k for k in both.ours if k[2] == "main" and str(k[0]).endswith(NAME)]
    assert [k[0] for k in mains] == [NAME]


def test_the_report_names_the_functions_with_their_time(both):
    evaluate = [f for f in both.run.report["findings"] if (f.get("function") or {}).get("name") == "evaluate"]
    assert evaluate and all(f["function"]["total_s"] > 0 for f in evaluate)  # was "0 µs total"


# -- user_view on tables made by hand ----------------------------------------------


def _stats(table: dict) -> dict:
    return {k: (v[0], v[1], v[2], v[3], dict(v[4])) for k, v in table.items()}


HOOK = (_TORCHLINT_DIR + "/profiler/torchprof.py", 10, "_on_step")


def test_work_under_a_recursive_caller_is_taken_out_once_per_function():
    # main -> call -> fwd -> call (recursion, as _call_impl -> forward -> _call_impl) -> hook
    main, call, fwd = ("t.py", 1, "main"), ("m.py", 2, "call"), ("t.py", 3, "fwd")
    stats = _stats({
        main: (1, 1, 0.1, 10.1, {}),
        call: (1, 2, 0.2, 10.0, {main: (1, 1, 0.1, 10.0), fwd: (1, 1, 0.1, 6.0)}),
        fwd: (2, 2, 0.5, 9.8, {call: (2, 2, 0.5, 9.8)}),
        HOOK: (1, 1, 2.0, 2.0, {call: (1, 1, 2.0, 2.0)}),
    })
    path = [call, fwd, call, main]  # as tooltime noted it: the hook's caller first
    out = user_view(stats, [(HOOK, path, 2.0)])
    assert HOOK not in out
    assert out[main][3] == pytest.approx(8.1)
    assert out[call][3] == pytest.approx(8.0)  # once, although it is twice on the path
    assert out[fwd][3] == pytest.approx(7.8)
    assert out[call][4][main][3] == pytest.approx(8.0) and out[call][4][fwd][3] == pytest.approx(4.0)
    assert all(v[3] >= 0 for v in out.values())


def test_unnoted_work_stays_with_its_caller_as_its_own_time():
    caller = ("t.py", 1, "step")
    stats = _stats({caller: (1, 1, 1.0, 1.5, {}), HOOK: (1, 1, 0.5, 0.5, {caller: (1, 1, 0.5, 0.5)})})
    out = user_view(stats)
    assert out[caller][2] == pytest.approx(1.5) and out[caller][3] == pytest.approx(1.5)


def test_a_probe_is_replaced_by_the_call_it_wrapped_without_the_work_noted_inside():
    caller, target = ("t.py", 1, "loop"), ("~", 0, "<method 'item' of 'torch._C.TensorBase' objects>")
    probe = (_TORCHLINT_DIR + "/profiler/probes.py", 5, "<torchlint probe Tensor.item>")
    stats = _stats({
        caller: (1, 1, 0.0, 3.0, {}),
        probe: (4, 4, 0.1, 3.0, {caller: (4, 4, 0.1, 3.0)}),
        target: (4, 4, 0.9, 0.9, {probe: (4, 4, 0.9, 0.9)}),
    })
    out = user_view(stats, [(probe, [caller], 2.0)])  # 2 s of an evaluation window's export inside it
    assert probe not in out
    # the call's own time only: the wrapper's 0.1 s is its caller's, as plain cProfile has no wrapper
    assert out[target][4] == {caller: pytest.approx((4, 4, 0.9, 0.9))}
    assert out[target][3] == pytest.approx(0.9) and out[caller][3] == pytest.approx(1.0)
    assert out[caller][2] == pytest.approx(0.1)


def test_a_probed_c_method_gets_its_name_back_and_a_probed_slot_goes_to_its_caller():
    caller = ("t.py", 1, "loop")
    item, bool_ = ("~", 0, "<function TensorBase.item at 0x7f01>"), ("~", 0, "<function TensorBase.__bool__ at 0x7f02>")
    stats = _stats({
        caller: (1, 1, 0.5, 2.0, {}),
        item: (3, 3, 0.6, 0.6, {caller: (3, 3, 0.6, 0.6)}),
        bool_: (2, 2, 0.9, 0.9, {caller: (2, 2, 0.9, 0.9)}),
    })
    names = {item[2]: "<method 'item' of 'torch._C.TensorBase' objects>", bool_[2]: None}
    out = user_view(stats, names=names)
    assert set(out) == {caller, ("~", 0, names[item[2]])}
    assert out[("~", 0, names[item[2]])][:4] == (3, 3, 0.6, 0.6)
    assert out[caller][2] == pytest.approx(1.4) and out[caller][3] == pytest.approx(2.0)


def test_a_long_recursive_chain_is_fast():
    import time

    stats: dict = {}
    prev = None
    for i in range(300):
        a = ("f.py", i, "a")
        stats[a] = (1, 1, 0.0, 10.0, {prev: (1, 1, 0.0, 10.0)} if prev else {})
        prev = a
    stats[HOOK] = (1, 1, 1.0, 1.0, {prev: (1, 1, 1.0, 1.0)})
    path = [("f.py", i, "a") for i in range(299, -1, -1)]
    t0 = time.perf_counter()
    out = user_view(stats, [(HOOK, path, 1.0)])
    assert time.perf_counter() - t0 < 1.0
    assert all(out[k][3] == pytest.approx(9.0) for k in path)


def test_a_recursive_function_only_torchlint_called_goes_with_it():
    """``Path.mkdir(parents=True)`` under a trace export calls itself: once the export's
    frame is gone it must go too, and what it called, but not what the program also calls."""
    main, mkdir, stat = ("t.py", 1, "main"), ("pathlib.py", 9, "mkdir"), ("~", 0, "<built-in method posix.stat>")
    export = (_TORCHLINT_DIR + "/profiler/torchprof.py", 20, "_export")
    stats = _stats({
        main: (1, 1, 0.5, 1.0, {}),
        export: (1, 1, 0.1, 0.4, {main: (1, 1, 0.1, 0.4)}),
        mkdir: (1, 2, 0.1, 0.3, {export: (1, 1, 0.1, 0.3), mkdir: (0, 1, 0.05, 0.1)}),
        stat: (2, 2, 0.2, 0.2, {mkdir: (1, 1, 0.1, 0.1), main: (1, 1, 0.1, 0.1)}),
    })
    out = user_view(stats)
    assert set(out) == {main, stat}
    assert out[stat][:4] == (1, 1, pytest.approx(0.1), pytest.approx(0.1)) and set(out[stat][4]) == {main}
