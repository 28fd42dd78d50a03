"""What each class of a file does with attributes of ``self``, as plain data for the class summary: the names its
methods assign (``self.block_ngram_repeat = 3`` in a subclass's ``__init__``) and the attributes its ``__init__``
keeps from one of its parameters (``self.block_ngram_repeat = block_ngram_repeat``). The join follows a switch a
base keeps from its constructor into its subclasses' ``super().__init__(...)`` only where no subclass sets it
itself (``SettingDefaults``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def self_attributes(ctx: FileContext) -> dict[int, tuple[set[str], set[tuple[str, str]]]]:
    """For each class (by id): the attribute names its methods assign on ``self``, and the ``(attribute,
    parameter)`` pairs its ``__init__`` assigns from a parameter by name."""
    tree = ctx.tree
    found: dict[int, tuple[set[str], set[tuple[str, str]]]] = {}
    for statement in (*tree.nodes(cst.Assign), *tree.nodes(cst.AugAssign), *tree.nodes(cst.AnnAssign)):
        function = tree.enclosing_function(statement)
        cls = tree.enclosing_class(statement) if function is not None else None
        if cls is None:
            continue
        sets, kept = found.setdefault(id(cls), (set(), set()))
        targets = [t.target for t in statement.targets] if type(statement) is cst.Assign else [statement.target]  # type: ignore[attr-defined]
        for target in targets:
            for element in (e.value for e in target.elements) if type(target) in (cst.Tuple, cst.List) else (target,):  # type: ignore[attr-defined]
                if type(element) is cst.Attribute and type(element.value) is cst.Name and element.value.value == "self":
                    sets.add(element.attr.value)
                    value = statement.value  # type: ignore[attr-defined]
                    if function.name.value == "__init__" and type(statement) is cst.Assign and element is target and type(value) is cst.Name \
                            and any(p.name.value == value.value for p in (*function.params.params, *function.params.kwonly_params)):
                        kept.add((element.attr.value, value.value))
    return found
