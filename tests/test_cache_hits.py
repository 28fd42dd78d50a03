"""What a cache is (analysis/cache_hits.py): a membership test whose key is never the key the branch
stores (hifi-gan's `if fmax not in mel_basis:` then `mel_basis[str(fmax) + '_' + str(y.device)] = ...`)
never hits, so its branch runs on every call; one that stores under the key it tests is a cache,
whether the key is an expression, a tuple in parentheses or not, or one name used for both."""

from __future__ import annotations

import libcst as cst
import pytest

from torchlint.analysis.cache_hits import never_hit, returns_on_a_cache_hit
from torchlint.analysis.tree import Tree


def _statements(code: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(code).body)


@pytest.mark.parametrize(("code", "tested", "stored"), [
    ("if fmax not in mel_basis:\n    mel_basis[str(fmax) + '_' + str(y.device)] = m\n", "fmax", "str(fmax) + '_' + str(y.device)"),
    ("if key not in self.cache:\n    self.cache[key.lower()] = v\n", "key", "key.lower()"),
    ("if (a, b) not in cache:\n    cache[b, a] = v\n", "(a, b)", "b, a"),
])
def test_a_test_that_never_finds_the_key_stored_never_hits(code: str, tested: str, stored: str) -> None:
    keys = never_hit(_statements(code)[0])
    assert keys is not None
    module = cst.Module(body=[])
    store = keys[1].slice
    assert module.code_for_node(keys[0]) == tested
    assert ", ".join(module.code_for_node(e.slice.value) for e in store) == stored  # type: ignore[union-attr]


@pytest.mark.parametrize("code", [
    "if fmax not in mel_basis:\n    mel_basis[fmax] = m\n",  # the key it tests
    "if (a, b) not in cache:\n    cache[a, b] = v\n",  # a tuple, with or without parentheses
    "if key not in cache:\n    other[key + 1] = v\n    cache[key] = v\n",  # another dict's store aside
    "if key not in cache:\n    cache[str(key)] = v\n    cache[key] = v\n",  # stored under the tested key too
    "if key in cache:\n    cache[other] = v\n",  # a hit test, not a miss's branch
    "if key not in cache:\n    build(key)\n",  # nothing stored here: no cache of this branch
])
def test_a_cache_that_stores_its_tested_key_hits(code: str) -> None:
    assert never_hit(_statements(code)[0]) is None


def _hit_and_rest(code: str) -> tuple[Tree, cst.BaseStatement, list[cst.BaseStatement]]:
    module = cst.parse_module(code)
    return Tree(module), module.body[0], list(module.body[1:])


def test_a_return_on_a_hit_is_a_cache_only_where_the_store_uses_the_tested_key() -> None:
    tree, hit, rest = _hit_and_rest("if key in self._cache:\n    return self._cache[key]\nt = build(key)\nself._cache[key] = t\n")
    assert returns_on_a_cache_hit(tree, hit, rest)
    tree, hit, rest = _hit_and_rest("if key in self._cache:\n    return self._cache[key]\nt = build(key)\nself._cache[str(key)] = t\n")
    assert not returns_on_a_cache_hit(tree, hit, rest)
