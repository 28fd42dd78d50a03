"""A step summary from CPython's ``ast`` for files that never mention torch or a step.

Such files skip libcst (the engine's pre-filter), but they still pass steps along: a
package ``__init__`` re-exports ``from .metrics import accuracy``, a plain helper calls
another helper. The ``ast`` the syntax check builds anyway gives the functions, classes,
imports and calls; only calls that run on every run of their caller are kept (any ``if``
or ``try`` around a call drops it: this summary has no guard analysis, so it stays
conservative).
"""

from __future__ import annotations

import ast

from torchlint.analysis.light_classes import abstract_methods, init_attributes, object_sets
from torchlint.analysis.switch_words import OPTION_KEYWORDS
from torchlint.analysis.light_arguments import falsy_args, given_arguments, literal_args, own_settings
from torchlint.analysis.summary import _BUILTINS, _NOT_PROJECT, BY_NAME, CONFIG_NAMES, CallSite, ClassSummary, FileSummary, Ref

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_KEEPS_OBJECT = frozenset({"to", "cuda", "cpu", "train", "eval", "half", "float", "double", "bfloat16"})


def light_summary(tree: ast.Module, path: str) -> FileSummary:
    imports, relative, stars = _imports(tree)
    every_node = walk(tree)
    functions: dict[str, ast.AST] = {}
    classes: list[ClassSummary] = []
    class_names = frozenset(node.name for node in every_node if isinstance(node, ast.ClassDef))
    _collect(tree, [], functions, classes, imports, relative, class_names)
    calls: list[CallSite] = []
    params = {key: _positional(function) for key, function in functions.items()}
    walked = {key: walk(function) for key, function in functions.items()}  # each function's nodes, walked once
    for key, function in functions.items():
        passed = _unbound_parameters(walked[key], params[key])
        assigned = _assigned(walked[key])
        for call in _unconditional_calls(function):
            if isinstance(call.func, ast.Name) and call.func.id in passed:  # `def run(model, x): return model(x)`
                target: Ref | None = ("object", ("passed", key, call.func.id), "__call__")
            elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id in passed:
                target = ("object", ("passed", key, call.func.value.id), call.func.attr)  # `model.forward(x)`, `model.loss(y)`
            else:
                target = _target(call.func, key, functions, imports, relative, bool(stars))
            if target is not None:
                args = _argument_refs(call, key, assigned, passed, lambda func: _target(func, key, functions, imports, relative, bool(stars)))
                calls.append(CallSite(key, target, None, args=args, given=given_arguments(call), falsy=falsy_args(call), literals=literal_args(call),
                                      own_settings=own_settings(call, passed, CONFIG_NAMES)))
    exports = [(name, ("import", level, target)) for name, (level, target) in relative.items()]
    exports += [(name, ("import", 0, target)) for name, target in imports.items() if target.split(".")[0] not in _NOT_PROJECT]
    returns = []
    for key, function in functions.items():
        refs = _returned(walked[key], key, functions, imports, relative, bool(stars))
        if refs:
            returns.append((key, refs))
    return FileSummary(path, tuple(functions), tuple(classes), tuple(calls), (), tuple(stars), tuple(exports),
                       params=tuple(params.items()), returns=tuple(returns), settings=_setting_values(every_node), assigned=_assigned_ints(every_node),
                       by_name=_builds_by_name(every_node, imports), names_device=_names_device(every_node), object_sets=object_sets(every_node))



def walk(node: ast.AST) -> list[ast.AST]:
    """``ast.walk``'s nodes in its order (breadth first), as a list: the summary asks several
    questions of the same nodes, and this walk (a list read while it grows, no generators)
    costs about half of ``ast.walk``'s."""
    found = [node]
    append = found.append
    for node in found:  # (the loop reaches what it appends: breadth first)
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                append(value)
            elif type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        append(item)
    return found


def _names_device(nodes: list[ast.AST]) -> bool:
    """``batch.cuda()``, ``x.to(device)``, a ``device``/``gpu`` name: a helper that places what it is
    given on a device, torch imported or not (``Devices.names_device``, for the join)."""
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("cuda", "to", "to_device"):
            return True
        name = node.id if isinstance(node, ast.Name) else node.arg if isinstance(node, (ast.arg, ast.keyword)) else None
        if name is not None and any(word in name.lower() for word in ("device", "cuda", "gpu")):
            return True
    return False


def _setting_values(nodes: list[ast.AST]) -> tuple[tuple[str, object], ...]:
    """argparse settings with a literal default (``add_argument("--num-workers", type=int,
    default=0)``, a float, a bool, a string, a flag's implicit False, an option's implicit None),
    as ``Constants.setting_values`` finds them: an options module without torch parses the run's settings."""
    found: dict[str, object] = {}
    for call in nodes:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("add_argument", "add")):
            continue
        if call.func.attr == "add" and not any(k.arg in OPTION_KEYWORDS for k in call.keywords):
            continue  # (configargparse's `group.add("--num_experts", type=int, default=0)`; a set's `add` is none)
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
        keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
        dest = keywords.get("dest")
        name = dest.value if isinstance(dest, ast.Constant) and isinstance(dest.value, str) else flags[0][2:].replace("-", "_") if flags else None
        action = keywords.get("action")
        action = action.value if isinstance(action, ast.Constant) else None if action is None else ""
        default = keywords.get("default")
        if default is None and action in ("store_true", "store_false"):
            value: object = action == "store_false"  # a flag's implicit default: off until passed
        elif default is None and (action is not None or "required" in keywords):
            continue  # (another action's, or a required option's: no default argparse gives)
        else:
            try:
                value = ast.literal_eval(default) if default is not None else None  # (no `default=`: argparse's None)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue  # a name or a call: not known here
        if name and (value is None or type(value) in (int, float, bool, str)):
            found[name] = value
    return tuple(found.items())


def _assigned_ints(nodes: list[ast.AST]) -> tuple[tuple[str, int | None], ...]:
    """The settings a config object is assigned (``cfg.num_workers = 0``), as ``Constants.assigned_ints``
    finds them: a yacs config module without torch sets the run's defaults."""
    found: dict[str, int | None] = {}
    for node in nodes:
        if not isinstance(node, (ast.Assign, ast.AugAssign)):
            continue
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in CONFIG_NAMES):
                continue
            value = None
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.UnaryOp)):
                try:
                    literal = ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    literal = None
                value = literal if type(literal) is int else None
            found[target.attr] = value if found.get(target.attr, value) == value else None
    return tuple(found.items())


def _builds_by_name(nodes: list[ast.AST], imports: dict[str, str]) -> bool:
    """``importlib.import_module(name)``, ``getattr(module, name)(...)``, ``globals()[name](...)``:
    objects built from names at run time (``StepSummarizer._builds_by_name``)."""
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = _dotted(func)
        head, _, rest = (name or "").partition(".")
        if name is not None and (f"{imports.get(head, head)}.{rest}" if rest else imports.get(head, head)) in BY_NAME:
            return True
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id in ("getattr", "globals", "locals") \
                and not (func.args and isinstance(func.args[0], ast.Name) and func.args[0].id == "self"):
            return True
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name) \
                and func.value.func.id in ("globals", "locals", "vars"):
            return True
    return False



def _positional(function: ast.AST) -> tuple[str, ...]:
    """The parameter names arguments fill, as ``objects.positional`` gives them."""
    args = function.args  # type: ignore[attr-defined]
    return tuple(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))


def _unbound_parameters(nodes: list[ast.AST], params: tuple[str, ...]) -> set[str]:
    """Parameters never assigned in the function: what a call of one runs is what callers pass."""
    names = set(params) - {"self", "cls"}
    if names:
        names -= {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _returned(nodes: list[ast.AST], key: str, functions: dict[str, ast.AST], imports: dict[str, str], relative: dict[str, tuple[int, str]], star: bool) -> tuple[Ref | None, ...]:
    """``return build(args)`` (a factory that delegates), ``return Model(...), Loss()``, or
    ``model = Model(...)`` ... ``return model``."""
    assigned: dict[str, ast.AST] = {}
    every: dict[str, list[ast.AST]] = {}  # each value a name is bound to (`if a: model = A() else: model = B()`)
    for node in sorted((n for n in nodes if isinstance(n, ast.Assign)), key=lambda n: (n.lineno, n.col_offset)):
        for target in node.targets:
            if isinstance(target, ast.Name):
                assigned[target.id] = node.value
                if not _rebinds(node.value, target.id):  # `model = model.to(device)` keeps the object
                    every.setdefault(target.id, []).append(node.value)

    def ref_of(value: ast.AST) -> Ref | None:
        table = _stored_functions(value, assigned)
        if table:  # `return models[name](params)`: what any function of the table returns
            refs = tuple(dict.fromkeys(("returned", ref, None) for item in table if (ref := _target(item, key, functions, imports, relative, star)) is not None))
            return ("each", refs) if len(refs) > 1 else refs[0] if refs else None
        for _ in range(8):
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _KEEPS_OBJECT):
                break
            value = value.func.value  # `Model(...).to(device)`
            value = assigned.get(value.id, value) if isinstance(value, ast.Name) else value
        ref = _target(value.func, key, functions, imports, relative, star) if isinstance(value, ast.Call) else None
        last = (_dotted(value.func) or "").rsplit(".", 1)[-1] if isinstance(value, ast.Call) else ""
        return None if ref is None else ref if last[:1].isupper() else ("returned", ref, None)

    for node in nodes:
        if isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            refs: list[Ref | None] = []
            for value in values:
                if isinstance(value, ast.Name) and len(every.get(value.id, ())) > 1:  # bound in several branches: any
                    several = tuple(dict.fromkeys(r for v in every[value.id] if (r := ref_of(v)) is not None))
                    refs.append(several[0] if len(several) == 1 else ("each", several) if several else None)
                    continue
                refs.append(ref_of(assigned.get(value.id, value) if isinstance(value, ast.Name) else value))
            return tuple(refs) if any(refs) else ()
    return ()


def _stored_functions(value: ast.AST, assigned: dict[str, ast.AST]) -> list[ast.Name]:
    """``models[name](params)`` with ``models = {"a": build_a, ...}`` (or a list): the
    functions the table holds, one of which the call runs."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Subscript) and isinstance(value.func.value, ast.Name)):
        return []
    table = assigned.get(value.func.value.id)
    items = table.values if isinstance(table, ast.Dict) else table.elts if isinstance(table, (ast.List, ast.Tuple)) else []
    return [item for item in items if isinstance(item, ast.Name)]


def _rebinds(value: ast.AST, name: str) -> bool:
    """``model.to(device).eval()``: a value that is ``name`` itself, moved or put in a mode."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _KEEPS_OBJECT:
        value = value.func.value
    return isinstance(value, ast.Name) and value.id == name


def _assigned(nodes: list[ast.AST]) -> dict[str, tuple[ast.AST, int | None]]:
    """Names the function binds from one value: ``model = Net()`` (element None) and
    ``model, diffusion = create_model_and_diffusion(...)`` (element 0 and 1); a name bound
    twice is left out (which value an argument holds is unknown)."""
    found: dict[str, tuple[ast.AST, int | None]] = {}
    twice: set[str] = set()
    for node in nodes:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        named = [(target, None)] if isinstance(target, ast.Name) else \
            [(e, i) for i, e in enumerate(target.elts) if isinstance(e, ast.Name)] if isinstance(target, ast.Tuple) else []
        for name, element in named:
            if name.id in found:
                twice.add(name.id)
            found[name.id] = (node.value, element)
    return {name: bound for name, bound in found.items() if name not in twice}


def _argument_refs(call: ast.Call, key: str, assigned: dict[str, tuple[ast.AST, int | None]], passed: set[str], target) -> tuple[tuple[int | str, Ref], ...]:  # type: ignore[no-untyped-def]
    """The arguments of ``call`` that may be objects of the project's classes (``steps.py``'s
    ``CallSite.args``): built here (``TrainLoop(model=model)`` after ``model, diffusion =
    create_model_and_diffusion(...)``), or a parameter passed on."""
    found: list[tuple[int | str, Ref]] = []
    arguments = [(i, a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords]
    for where, value in arguments:
        if isinstance(value, ast.Starred) or where is None:
            break  # positions after *args are unknown
        element = None
        if isinstance(value, ast.Name) and value.id in passed and value.id not in assigned:
            found.append((where, ("passed", key, value.id)))
            continue
        if isinstance(value, ast.Name) and value.id in assigned:
            value, element = assigned[value.id]
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _KEEPS_OBJECT:
            value = value.func.value  # `Net().cuda()`
        ref = target(value.func) if isinstance(value, ast.Call) else None
        if ref is None:
            continue
        last = (_dotted(value.func) or "").rsplit(".", 1)[-1]  # type: ignore[attr-defined]
        if last.lstrip("_")[:1].isupper():
            if element is None:
                found.append((where, ref))  # a class: the object it builds
        else:
            found.append((where, ("returned", ref, element)))  # what a factory returns
    return tuple(found)


def _imports(tree: ast.Module) -> tuple[dict[str, str], dict[str, tuple[int, str]], list[tuple[int, str]]]:
    absolute: dict[str, str] = {}
    relative: dict[str, tuple[int, str]] = {}
    stars: list[tuple[int, str]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                absolute[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                if alias.name == "*":
                    stars.append((node.level, module))
                elif node.level:
                    relative[alias.asname or alias.name] = (node.level, f"{module}.{alias.name}" if module else alias.name)
                else:
                    absolute[alias.asname or alias.name] = f"{module}.{alias.name}"
    return absolute, relative, stars


def _collect(node: ast.AST, prefix: list[str], functions: dict[str, ast.AST], classes: list[ClassSummary], imports: dict[str, str],
             relative: dict[str, tuple[int, str]], class_names: frozenset[str]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[".".join([*prefix, child.name])] = child
            _collect(child, [*prefix, child.name], functions, classes, imports, relative, class_names)
        elif isinstance(child, ast.ClassDef):
            key = ".".join([*prefix, child.name])
            bases = tuple(ref for base in child.bases if (ref := _base(base, imports, relative)) is not None)
            methods = tuple(s.name for s in child.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
            # (a name neither imported nor a class of this file names nothing the join can follow: `str`, a builtin)
            attributes = init_attributes(child, key, lambda name: _base_named(name, imports, relative, class_names))
            classes.append(ClassSummary(key, bases, methods, attributes, abstract=abstract_methods(child)))
            _collect(child, [*prefix, child.name], functions, classes, imports, relative, class_names)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _base(base: ast.AST, imports: dict[str, str], relative: dict[str, tuple[int, str]]) -> Ref | None:
    name = _dotted(base)
    return _named_ref(name, imports, relative) if name is not None else None


def _named_ref(name: str, imports: dict[str, str], relative: dict[str, tuple[int, str]]) -> Ref:
    """The reference a dotted name of the file stands for: imported, else the file's own."""
    head, _, rest = name.partition(".")
    if head in relative:
        level, target = relative[head]
        return ("import", level, f"{target}.{rest}" if rest else target)
    if head in imports:
        return ("import", 0, f"{imports[head]}.{rest}" if rest else imports[head])
    return ("local", name)


def _base_named(name: str, imports: dict[str, str], relative: dict[str, tuple[int, str]], class_names: frozenset[str]) -> Ref | None:
    """``_base`` of a dotted name, where it is imported or a class of this file."""
    head = name.partition(".")[0]
    return _named_ref(name, imports, relative) if head in imports or head in relative or name in class_names else None


def _unconditional_calls(function: ast.AST) -> list[ast.Call]:
    """Calls in the function's own body that are not under an ``if``/``try``/loop-``else``."""
    found: list[ast.Call] = []
    stack = _children(function)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_SCOPES, ast.Lambda, ast.If, ast.IfExp, ast.Try, ast.BoolOp)):
            continue
        if isinstance(node, ast.Call):
            found.append(node)
        stack.extend(_children(node))
    return found


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes(node)`` as a list, without its generators."""
    found: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif type(value) is list:
            found.extend([item for item in value if isinstance(item, ast.AST)])
    return found


def _target(func: ast.AST, caller: str, functions: dict[str, ast.AST], imports: dict[str, str], relative: dict[str, tuple[int, str]], star: bool) -> Ref | None:
    if isinstance(func, ast.Name):
        scope = caller.split(".")
        for depth in range(len(scope), -1, -1):
            key = ".".join([*scope[:depth], func.id])
            if key in functions:
                return ("local", key)
        if func.id in relative:
            return ("import", *relative[func.id])
        if func.id in imports:
            return ("import", 0, imports[func.id])
        return ("star", func.id) if star and func.id not in _BUILTINS else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and "." in caller:
        return ("method", caller.rsplit(".", 1)[0], func.attr)
    name = _dotted(func)
    if name is not None:
        head, _, rest = name.partition(".")
        if head in relative:
            level, target = relative[head]
            return ("import", level, f"{target}.{rest}")
        if head in imports and imports[head].split(".")[0] not in _NOT_PROJECT:
            return ("import", 0, f"{imports[head]}.{rest}")
    return None
