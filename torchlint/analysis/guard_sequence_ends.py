"""A branch that runs when a decoded token is the end of its sequence (kospeech's beam search: ``if
torch.any(topk_current_vs == self.eos_id):``, then ``self._get_successor(...)`` per finished beam):
its body runs once per finished sequence, not per decoded token, so it is a rare guard
(``Guards._rare_branch``) with its own words (``Guards.rare_words``, from ``sequence_end_words``,
which the light path reads without libcst)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import libcst as cst

from torchlint.analysis.literal_tests import literal
from torchlint.analysis.names import dotted

# The names an end-of-sequence id goes by: `eos`, `eos_id`, `self.eos_token_id`, `end_token`, `eot_idx`.
_END_ID = re.compile(r"^(eos|eot|end)(_token)?(_ids?|_idx|_index)?$")


def sequence_end_test(test: cst.BaseExpression, descendants: Callable[[cst.CSTNode], Iterable[cst.CSTNode]]) -> str | None:
    """The comparison in ``test`` of a value with an end-of-sequence id (``topk_current_vs ==
    self.eos_id``, inside ``torch.any(...)`` too), as written; None where it has none."""
    for node in (test, *descendants(test)):
        if type(node) is not cst.Comparison or len(node.comparisons) != 1 or type(node.comparisons[0].operator) is not cst.Equal:
            continue
        sides = (node.left, node.comparisons[0].comparator)
        # (`x == eos_id` against a literal other side is a setting's test, not a token's)
        if any(_names_end(side) for side in sides) and not any(literal(side) is not None for side in sides):
            return cst.Module([]).code_for_node(node)
    return None


def _names_end(side: cst.BaseExpression) -> bool:
    name = dotted(side) if type(side) in (cst.Name, cst.Attribute) else None
    return name is not None and _END_ID.match(name.rpartition(".")[2].lower()) is not None
