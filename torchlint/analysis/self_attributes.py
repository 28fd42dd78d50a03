"""What a class does with attributes of ``self``, as plain data for its class summary, read off the file's bindings
(``Bindings.self_attrs``): the names its methods assign (``self.block_ngram_repeat = 3`` in a subclass's
``__init__``) and the attributes its ``__init__`` keeps from one of its parameters (``self.block_ngram_repeat =
block_ngram_repeat``). The join follows a switch a base keeps from its constructor into its subclasses'
``super().__init__(...)`` only where no subclass sets it itself (``SettingDefaults``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


def self_attributes(ctx: FileContext, cls: cst.ClassDef) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The attribute names ``cls``'s methods assign on ``self``, and the ``(attribute, parameter)`` pairs its
    ``__init__`` assigns from a parameter by name, each sorted."""
    sets: set[str] = set()
    kept: set[tuple[str, str]] = set()
    for name, bindings in ctx.bindings.self_attrs.get(id(cls), {}).items():
        attribute = name[len("self."):]
        sets.add(attribute)
        for binding in bindings:
            function = ctx.tree.enclosing_function(binding.node)
            value = binding.value
            if binding.kind == "assign" and binding.element is None and type(value) is cst.Name and function is not None \
                    and function.name.value == "__init__" \
                    and any(p.name.value == value.value for p in (*function.params.params, *function.params.kwonly_params)):
                kept.add((attribute, value.value))
    return tuple(sorted(sets)), tuple(sorted(kept))
