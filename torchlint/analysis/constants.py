"""Constant propagation for integer sizes: literals, module constants, defaults."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.device_names import string_value
from torchlint.analysis.literal_tests import literal
from torchlint.analysis.members import method_named
from torchlint.analysis.names import dotted
from torchlint.analysis.summary import _NOT_PROJECT, CONFIG_NAMES
from torchlint.analysis.switch_words import OPTION_KEYWORDS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_OPERATORS = {cst.Add: operator.add, cst.Subtract: operator.sub, cst.Multiply: operator.mul, cst.FloorDivide: operator.floordiv, cst.Power: operator.pow}
_CONFIG_OBJECTS = CONFIG_NAMES | {"self.args", "self.config", "self.cfg", "self.hparams", "self.opt"}


def is_setting(expr: cst.BaseExpression) -> bool:
    """A value fixed for the run: a field of a config object (``args.augment_p``,
    ``self.cfg.mode``) or an UPPER_CASE module constant."""
    name = dotted(expr)
    if name is None:
        return False
    base, _, attr = name.rpartition(".")
    return base in _CONFIG_OBJECTS or not base and attr.isupper() and len(attr) > 1


class Constants:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._argparse: dict[str, cst.BaseExpression] | None = None
        self._fields: dict[str, cst.BaseExpression] | None = None
        # field -> (its class, its position): for the fields of classes no code of this file builds
        self._unbuilt: dict[str, tuple[str, int]] = {}
        # while recording (``assumed_fields``): the unbuilt fields' defaults a value rests on
        self._assumed: list[tuple[str, str, int]] | None = None

    def int_value(self, expr: cst.BaseExpression | None, at: cst.CSTNode | None = None, depth: int = 0) -> int | None:
        """The integer ``expr`` always has where ``at`` stands, or None if not known."""
        if expr is None or depth > 8:
            return None
        at = at or expr
        if isinstance(expr, cst.Integer):
            try:
                return int(expr.evaluated_value)
            except ValueError:
                return None
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            inner = self.int_value(expr.expression, at, depth + 1)
            return -inner if inner is not None else None
        if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _OPERATORS:
            left = self.int_value(expr.left, at, depth + 1)
            right = self.int_value(expr.right, at, depth + 1)
            if left is None or right is None:
                return None
            try:
                return int(_OPERATORS[type(expr.operator)](left, right))
            except (ZeroDivisionError, OverflowError, ValueError):
                return None
        name = dotted(expr)
        if name is None:
            return None
        return self._name_value(name, at, depth)

    def _name_value(self, name: str, at: cst.CSTNode, depth: int) -> int | None:
        base, _, attr = name.rpartition(".")
        if base in _CONFIG_OBJECTS:
            source = self.argparse_defaults().get(attr)
            if source is None:
                source = self.field_defaults().get(attr)
                if source is not None and attr in self._unbuilt and self._assumed is not None:
                    self._assumed.append((self._unbuilt[attr][0], attr, self._unbuilt[attr][1]))
            return self.int_value(source, source, depth + 1) if source is not None else None
        bindings = self.ctx.bindings.lookup(name, at)
        if base == "self" and bindings:
            pass
        elif "." in name:
            return None
        binding = self._sole_value(bindings)
        if binding is None and len(bindings) == 1 and bindings[0].kind == "param":
            # (a parameter the file's one call passes: `TD3_BC(**kwargs)` with `kwargs = {"policy_freq": config.policy_freq}`)
            passed = self.passed_value(bindings[0].node)
            return None if passed is None else self.int_value(passed, passed, depth + 1)
        return None if binding is None else self.int_value(binding.value, binding.node, depth + 1)

    def passed_value(self, param: cst.CSTNode) -> cst.BaseExpression | None:
        """What the one call of ``param``'s function in this file passes for it in a
        ``**kwargs`` dict written out once (``kwargs = {"policy_freq": config.policy_freq}``
        then ``TD3_BC(**kwargs)``, CORL's trainers): a value the constants can follow, to the
        config field's default there. None where several calls, or the call passes it otherwise (by name too: not followed)."""
        tree = self.ctx.tree
        function = tree.enclosing_function(param)
        if function is None or not isinstance(param, cst.Param):
            return None
        cls = tree.enclosing_class(function)
        if function.name.value != "__init__" or cls is None:
            return None  # (a class's construction: a function's calls are many, a trainer is built once)
        calls = self.ctx.name_calls(cls.name.value)
        if len(calls) != 1:
            return None
        name, found = param.name.value, None
        for arg in calls[0].args:
            if arg.keyword is not None and arg.keyword.value == name:
                return None  # (by name: left to the callers' own analyses, TL402's sizes among them, as before)
            elif arg.star == "**" and isinstance(arg.value, cst.Name):
                bound = self.ctx.bindings.lookup(arg.value.value, calls[0])
                if len(bound) != 1 or bound[0].kind != "assign" or not isinstance(bound[0].value, cst.Dict) or \
                        _written_into(self.ctx, arg.value.value, calls[0]):
                    return None  # a dict made elsewhere, rebound or written into: what it holds is not in sight
                for element in bound[0].value.elements:
                    if isinstance(element, cst.DictElement) and string_value(element.key) == name:
                        found = element.value
            elif arg.star:
                return None  # through `*args`: not followed (one by position is another parameter's, or the call's error)
        return found

    def bool_value(self, expr: cst.BaseExpression | None, at: cst.CSTNode | None = None, depth: int = 0) -> bool | None:
        """The truth ``expr`` always has where ``at`` stands (``True``, ``not DEBUG``, a
        module constant, an argparse or parameter default, a config field), or None."""
        if expr is None or depth > 8:
            return None
        at = at or expr
        if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
            return expr.value == "True"
        if isinstance(expr, cst.Integer):
            return self.int_value(expr) != 0
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            inner = self.bool_value(expr.expression, at, depth + 1)
            return None if inner is None else not inner
        name = dotted(expr)
        if name is None:
            return None
        source = self.setting_default(name)
        if source is not None:
            return self.bool_value(source, source, depth + 1)
        if "." in name:
            return None
        binding = self._sole_value(self.ctx.bindings.lookup(name, at))
        return None if binding is None else self.bool_value(binding.value, binding.node, depth + 1)

    def global_switch_off(self, name: str, at: cst.CSTNode) -> str | None:
        """Words for an UPPER_CASE module global that is false at the run's defaults wherever it is
        bound: each module-level binding a false literal or a setting whose default is false (llm.c's
        ``FLASH = 0``, then ``FLASH = args.flash`` under ``__main__`` with ``--flash`` at ``default=0``):
        "`--flash` is off by default" (the words); None where any binding may be true, or for anything else."""
        if not (name.isupper() and len(name) > 1):
            return None
        bindings = self.ctx.bindings.lookup(name, at)
        settings = []
        for binding in bindings:
            if binding.kind != "assign" or binding.element is not None or self.ctx.tree.enclosing_function(binding.node) is not None:
                return None  # (unpacked, or set by a function: `global FLASH` in a setup helper may set anything)
            value = binding.value
            setting = dotted(value) if type(value) in (cst.Name, cst.Attribute) and value.value not in ("True", "False", "None") else None  # type: ignore[union-attr]
            source = self.setting_default(setting) if setting is not None else value
            if source is None or self.bool_value(source, source) is not False:
                return None
            if setting is not None:
                settings.append(setting)
        if not bindings:
            return None
        if settings:
            option = settings[0].rpartition(".")[2]
            return f"`--{option.replace('_', '-')}` is off by default" if option in self.argparse_defaults() \
                else f"`{settings[0]}` is off by default"
        return f"`{name}` is false wherever the module binds it"

    def field_off(self, attr: str) -> str | None:
        """Words for a config class's field false by default that no code of this file turns on: the
        class is built here, no construction passes the field (nor ``*``/``**``), and nothing assigns
        ``x.<attr> = ...`` (llm.c's ``flash: bool = False`` in ``LlamaConfig``, built as ``LlamaConfig()``);
        None otherwise (a class built only elsewhere: its callers' to set)."""
        for cls in self.ctx.tree.nodes(cst.ClassDef):
            fields = [small for statement in cls.body.body if isinstance(statement, cst.SimpleStatementLine)
                      for small in statement.body if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name)]
            index = next((i for i, f in enumerate(fields) if f.target.value == attr), None)  # type: ignore[attr-defined]
            if index is None:
                continue
            constructions = self._constructions(cls.name.value)
            default = fields[index].value
            if not constructions or any(_passes(call, attr, index) for call in constructions) or default is None \
                    or self.bool_value(default, default) is not False:
                return None
            # (`model_args.flash = args.flash`: set somewhere; not a module's own copy, `self.flash = config.flash`)
            if any(type(t.target) is cst.Attribute and t.target.attr.value == attr and dotted(t.target) != f"self.{attr}"
                   for node in self.ctx.tree.nodes(cst.Assign) for t in node.targets):
                return None
            return f"`{attr}` defaults to `{self.ctx.module.code_for_node(default)}` in `{cls.name.value}`, which no code here sets"
        return None

    def _sole_value(self, bindings: list):  # type: ignore[no-untyped-def, type-arg]
        """The one assignment or parameter default that gives a name its value, or None."""
        if len(bindings) != 1:
            return None  # rebound or unknown: the value depends on the path taken
        binding = bindings[0]
        if binding.kind not in ("assign", "param") or binding.element is not None:
            return None
        if binding.kind == "param" and self.param_overridden(binding.node):
            return None  # a call in this file passes its own value: the default is not the value
        return binding

    def setting_default(self, name: str) -> cst.BaseExpression | None:
        """The default of a setting read from a config object (``args.backend``,
        ``cfg.deterministic``): its argparse ``default=`` (or a flag's implicit one), or a
        config class's field default; None for anything else."""
        base, _, attr = name.rpartition(".")
        if base not in _CONFIG_OBJECTS:
            return None
        source = self.argparse_defaults().get(attr)
        return source if source is not None else self.field_defaults().get(attr)

    def setting_values(self) -> tuple[tuple[str, object], ...]:
        """This file's argparse settings with a literal default (``--num-workers`` with
        ``default=0`` → ``("num_workers", 0)``; a float, a bool, a flag's implicit False, None, a
        string), as plain data for the step summary: another file that is passed the parsed
        namespace reads its defaults here."""
        found = []
        for dest, source in self.argparse_defaults().items():
            value = literal(source)  # a literal: not a name this file may rebind
            if value is not None:
                found.append((dest, value[1]))
        return tuple(found)

    def assigned_ints(self) -> tuple[tuple[str, int | None], ...]:
        """The settings a config object is assigned in this file (``cfg.num_workers = 0`` in yacs'
        ``def set_cfg(cfg)``): name -> the integer literal, or None for any other value, an
        augmented assignment or two values (``FileSummary.assigned``)."""
        found: dict[str, int | None] = {}
        for assign in (*self.ctx.tree.nodes(cst.Assign), *self.ctx.tree.nodes(cst.AugAssign)):
            for target in assign.targets if type(assign) is cst.Assign else (assign,):
                node = target.target
                if type(node) is not cst.Attribute or type(node.value) is not cst.Name or node.value.value not in CONFIG_NAMES:
                    continue
                literal = type(assign) is cst.Assign and isinstance(assign.value, (cst.Integer, cst.UnaryOperation))
                value = self.int_value(assign.value) if literal else None
                name = node.attr.value
                found[name] = value if found.get(name, value) == value else None
        return tuple(found.items())

    def imported_setting(self, name: str, at: cst.CSTNode) -> tuple[None, str, str] | None:
        """``cfg.num_workers`` where ``cfg`` is a config object imported from a module of the
        project (GraphGym's ``from graphgym.config import cfg``, a yacs ``CfgNode``): (None, ``"cfg"``,
        ``"num_workers"``), whose value the project's assignments of that setting say
        (``SettingDefaults.assigned_default``); None for anything else."""
        base, _, attr = name.rpartition(".")
        if base not in CONFIG_NAMES or not attr:
            return None
        if self.ctx.bindings.lookup(base, at):
            return None  # (a parameter: `setting_source`; a namespace made or rebound here: its own defaults)
        imports = self.ctx.imports
        if base in imports.relative:
            return (None, base, attr)  # (`from .config import cfg`: the package's own)
        qualified = imports.module_level.get(base)
        return (None, base, attr) if qualified is not None and qualified.split(".")[0] not in _NOT_PROJECT else None

    def setting_source(self, name: str, at: cst.CSTNode) -> tuple[cst.FunctionDef, str, str] | None:
        """Where the config object of setting ``name`` comes from when this file does not
        define it: ``args.num_workers`` in ``def make_loaders(args)`` → (that function,
        ``"args"``, ``"num_workers"``); ``self.args.num_workers`` where ``__init__`` keeps
        ``self.args = args`` → (``__init__``, ``"args"``, ...). The callers' files hold its
        default (analysis/setting_defaults.py); None for anything else."""
        base, _, attr = name.rpartition(".")
        if base not in _CONFIG_OBJECTS or not attr:
            return None
        tree = self.ctx.tree
        if base.startswith("self."):
            function = tree.enclosing_function(at)
            cls = tree.enclosing_class(function) if function is not None else None
            init = method_named(cls, "__init__") if cls is not None else None
            kept = _kept_parameter(init, base.partition(".")[2]) if init is not None else None
            return (init, kept, attr) if init is not None and kept is not None else None
        bound = self.ctx.bindings.lookup(base, at)
        if len(bound) != 1 or bound[0].kind != "param":
            return None  # a local or global namespace: parsed here, or rebound
        function = tree.enclosing_function(bound[0].node)
        return (function, base, attr) if function is not None else None

    def param_overridden(self, param: cst.CSTNode) -> bool:
        """Does a call in this file pass an argument for ``param`` (by position, by name, or
        possibly through ``*args``/``**kwargs``)? For ``__init__``, calls of the class count."""
        tree = self.ctx.tree
        function = tree.enclosing_function(param)
        if function is None or not isinstance(param, cst.Param):
            return False
        cls = tree.enclosing_class(function)
        is_method = cls is not None and tree.parent(tree.parent(function)) is cls
        positional = list(function.params.posonly_params) + list(function.params.params)
        index = next((i for i, p in enumerate(positional) if p is param), None)
        if index is not None and is_method:
            index -= 1  # self
        name = param.name.value
        if function.name.value == "__init__" and is_method:
            callee = cls.name.value  # type: ignore[union-attr]
            calls = self.ctx.name_calls(callee)
        elif is_method:
            calls = self.ctx.method_calls({function.name.value})
        else:
            calls = self.ctx.name_calls(function.name.value)
        for call in calls:
            if any(a.star for a in call.args) or any(a.keyword is not None and a.keyword.value == name for a in call.args):
                return True
            if index is not None and index >= 0 and sum(1 for a in call.args if a.keyword is None) > index:
                return True
        return False

    def argparse_defaults(self) -> dict[str, cst.BaseExpression]:
        """``--hidden-size`` with ``default=100`` → ``{"hidden_size": Integer(100)}``."""
        if self._argparse is None:
            found: dict[str, cst.BaseExpression] = {}
            for call in self.ctx.method_calls({"add_argument", "add"}):
                if self.ctx.method_name(call) == "add" and not any(a.keyword is not None and a.keyword.value in OPTION_KEYWORDS for a in call.args):
                    continue  # (configargparse's `group.add("--num_experts", type=int, default=0)`; a set's `add` is none)
                dest, default = None, None
                for arg in call.args:
                    if arg.keyword is None:
                        text = string_value(arg.value)
                        if text and text.startswith("--") and dest is None:
                            dest = text[2:].replace("-", "_")
                    elif arg.keyword.value == "dest":
                        dest = string_value(arg.value)
                    elif arg.keyword.value == "default":
                        default = arg.value
                    elif arg.keyword.value == "action" and default is None:
                        # a flag's implicit default: `store_true` is off until passed
                        action = string_value(arg.value)
                        if action in ("store_true", "store_false"):
                            default = cst.Name("False" if action == "store_true" else "True")
                if dest and default is None and not any(a.keyword is not None and a.keyword.value in ("required", "action") for a in call.args):
                    default = cst.Name("None")  # argparse's own default for an option given no `default=`
                if dest and default is not None:
                    found[dest] = default
            self._argparse = found
        return self._argparse

    def field_defaults(self) -> dict[str, cst.BaseExpression]:
        """``hidden: int = 128`` in a dataclass or config class body, unless every
        construction of the class in this file passes its own value
        (``GPT(GPTConfig(vocab_size=50304))``: 50304 is the model's size, not the default)."""
        if self._fields is None:
            found: dict[str, cst.BaseExpression] = {}
            for cls in self.ctx.tree.nodes(cst.ClassDef):
                fields = [small for statement in cls.body.body if isinstance(statement, cst.SimpleStatementLine)
                          for small in statement.body if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name)]
                constructions = self._constructions(cls.name.value)
                for index, field in enumerate(fields):
                    name = field.target.value  # type: ignore[attr-defined]
                    if field.value is not None and not (constructions and all(_passes(call, name, index) for call in constructions)):
                        found[name] = field.value
                        if not constructions:  # built elsewhere, if at all: the project join knows what is passed
                            self._unbuilt[name] = (cls.name.value, index)
                        else:
                            self._unbuilt.pop(name, None)
            self._fields = found
        return self._fields

    def int_value_assuming(self, expr: cst.BaseExpression | None, at: cst.CSTNode | None = None) -> tuple[int | None, tuple[tuple[str, str, int], ...]]:
        """``int_value``, with the config fields whose defaults it rests on where no code of this
        file builds their class: (class, field, position) each. Another file's
        ``GPTConfig(vocab_size=50304)`` makes the default no model's size."""
        self._assumed = []
        try:
            return self.int_value(expr, at), tuple(self._assumed)
        finally:
            self._assumed = None

    def _constructions(self, class_name: str) -> list[cst.Call]:
        """``Config(...)`` calls in this file (also ``module.Config(...)``)."""
        calls = []
        for call in self.ctx.tree.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Name and func.value == class_name or type(func) is cst.Attribute and func.attr.value == class_name:
                calls.append(call)
        return calls


def _passes(call: cst.Call, name: str, index: int) -> bool:
    """Does ``call`` pass a value for the field ``name`` (at ``index``), or possibly
    (``*args``, ``**kwargs``)?"""
    if any(a.star for a in call.args) or any(a.keyword is not None and a.keyword.value == name for a in call.args):
        return True
    return sum(1 for a in call.args if a.keyword is None) > index


def _kept_parameter(init: cst.FunctionDef, attribute: str) -> str | None:
    """The parameter ``__init__`` keeps as ``self.<attribute>`` (``self.args = args``), when it
    is the one assignment of that attribute there."""
    params = {p.name.value for p in init.params.params}
    kept = [s.value for line in init.body.body if isinstance(line, cst.SimpleStatementLine) for s in line.body
            if isinstance(s, cst.Assign) and len(s.targets) == 1 and dotted(s.targets[0].target) == f"self.{attribute}"]
    if len(kept) == 1 and isinstance(kept[0], cst.Name) and kept[0].value in params:
        return kept[0].value
    return None


def _written_into(ctx: FileContext, name: str, call: cst.Call) -> bool:
    """Is the dict ``name`` written into in ``call``'s function (``kwargs["x"] = 1``, ``kwargs.update(...)``)?"""
    function = ctx.tree.enclosing_function(call)
    for node in ctx.tree.nodes(cst.Subscript):
        if dotted(node.value) == name and ctx.tree.enclosing_function(node) is function and isinstance(ctx.tree.parent(node), cst.AssignTarget):
            return True
    return any(dotted(c.func) == f"{name}.update" or dotted(c.func) == f"{name}.setdefault" for c in ctx.method_calls({"update", "setdefault"})
               if ctx.tree.enclosing_function(c) is function)

