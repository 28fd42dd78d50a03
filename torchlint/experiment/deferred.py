"""The deferred-sync variant of TL101/TL102: keep the per-step value on the device, read it once.

The commonest GPU findings read a value back every step only to keep it:

- **accumulated**: ``total += loss.item()`` (or ``+= loss.item() * n``, ``-=``) becomes
  ``total += loss.detach()`` (``* n``): ``total`` turns into a device tensor at the
  first step and no step waits for the device;
- **appended**: ``losses.append(loss.item())`` (``.tolist()``, or TL102's
  ``preds.append(out.cpu())``) appends the tensor itself (``loss.detach()``; ``out``,
  whose autograd history the original's ``.cpu()`` kept too).

Every place that reads the name (``print(total / n)``, ``np.mean(losses)``,
``torch.cat(preds)``, in any scope) is wrapped in ``__torchlint_read__(name)``
(:mod:`torchlint.profiler.deferred`), which hands it what the original held: the
tensor converted as the original call did, a list's tensors converted in place. So the
variant computes what the original computes, and syncs only where the value is read: a
read every step keeps its sync, and the experiment then measures no saving, as it should.

Refused, with the reason: a value printed or compared where it is made (the sync is
needed there: reading it every N steps is the fix, and no rewrite can choose N); a
name that is not a plain local or global (``self.total``, ``stats["loss"]``: their
readers cannot be found); an accumulator also changed with ``*=``, ``/=`` ... (in place
on an integer tensor they fail); a list that something else appends to, extends or
aliases (``h = losses``, ``return losses``, ``[losses]``): its other elements, or the
alias, would be read unconverted.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

from torchlint.findings import Finding, Fix, FixSafety
from torchlint.profiler.deferred import NAMES as READS

#: the call each rule's finding points at, and how a read converts the kept tensor
HOW = {("TL101", "item"): "item", ("TL101", "tolist"): "tolist", ("TL102", "cpu"): "cpu"}
#: list methods that neither read its elements nor add any: the list is not read there
NOT_READING = frozenset({"clear"})
#: list methods that add elements the variant would not have made tensors of its own
ADDING = frozenset({"append", "extend", "insert", "__iadd__"})
#: calls that store their argument in another container: the list would be aliased
STORING = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "put"})


class Refused(Exception):
    """No deferred-sync variant for this finding; the message says why."""


def deferred_fixes(finding: Finding, wrapper: MetadataWrapper) -> list[Fix]:
    """The node replacements of the variant: the call, then every read of the kept name."""
    positions = wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    call = _call_at(finding, positions)
    method = call.func.attr.value  # type: ignore[attr-defined]
    how = HOW.get((finding.code, method))
    if how is None:
        raise Refused(f"`.{method}()` has no deferred read (only `.item()`/`.tolist()` for TL101, `.cpu()` for TL102)")
    receiver = call.func.value  # type: ignore[attr-defined]
    kept = receiver if how == "cpu" else cst.Call(func=cst.Attribute(value=_paren(receiver), attr=cst.Name("detach")))
    target, kind = _where_kept(call, parents, how)
    reads = _reads(target, kind, call, wrapper, parents)
    fixes = [Fix(call, kept, FixSafety.UNSAFE, f"{kind}: the value kept on the device, read where it is used")]
    for name in reads:
        fixes.append(Fix(name, cst.Call(func=cst.Name(READS[how]), args=[cst.Arg(name)]), FixSafety.UNSAFE, "read once"))
    return fixes


def _call_at(finding: Finding, positions: dict) -> cst.Call:  # type: ignore[type-arg]
    loc = finding.location
    for node, rng in positions.items():
        if isinstance(node, cst.Call) and (rng.start.line, rng.start.column) == (loc.line, loc.column - 1) \
                and isinstance(node.func, cst.Attribute) and not node.args:
            if loc.end_line is None or (rng.end.line, rng.end.column) == (loc.end_line, (loc.end_column or 1) - 1):
                return node
    raise Refused(f"no argument-less method call at {loc.line}:{loc.column}")


def _where_kept(call: cst.Call, parents: dict, how: str) -> tuple[cst.Name, str]:  # type: ignore[type-arg]
    """The plain name the value is accumulated into or appended to, or why not."""
    node: cst.CSTNode = call
    parent = parents[node]
    while isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)) and how == "item":
        node, parent = parent, parents[parent]  # `loss.item() * n`: arithmetic on the value, kept as it is
    if isinstance(parent, cst.AugAssign) and parent.value is node:
        if not isinstance(parent.operator, (cst.AddAssign, cst.SubtractAssign)) or how != "item":
            raise Refused("only `+=`/`-=` of a scalar is accumulated on the device")
        if not isinstance(parent.target, cst.Name):
            raise Refused("the value is accumulated into an attribute or an item: its readers cannot be found")
        return parent.target, "accumulated"
    if isinstance(parent, cst.Arg) and parent.keyword is None:
        outer = parents[parent]
        if isinstance(outer, cst.Call) and isinstance(outer.func, cst.Attribute) and outer.func.attr.value == "append" \
                and len(outer.args) == 1:
            if not isinstance(outer.func.value, cst.Name):
                raise Refused("the value is appended to an attribute or an item: its readers cannot be found")
            return outer.func.value, "appended"
    raise Refused("the value is used where it is read (printed, compared, passed on): the sync is needed there; "
                  "reading it every N steps is the fix, and no rewrite can choose N")


def _reads(target: cst.Name, kind: str, call: cst.Call, wrapper: MetadataWrapper, parents: dict) -> list[cst.Name]:  # type: ignore[type-arg]
    """Every read of the name bound where ``target`` is, or Refused when one cannot be wrapped soundly."""
    scopes = wrapper.resolve(ScopeProvider)
    name = target.value
    binding = _binding_scope(target, scopes, name)
    for assignment in binding.assignments[name]:
        _check_write(assignment.node, kind, call, parents)
    reads = []
    for scope in {s for s in scopes.values() if s is not None}:
        for access in scope.accesses[name]:
            if not any(getattr(r, "scope", None) is binding for r in access.referents):
                continue  # another variable of the same name
            node = access.node
            if not isinstance(node, cst.Name):
                raise Refused(f"`{name}` is read in a form the variant cannot wrap")
            if kind == "appended" and not _reads_elements(node, call, parents, name):
                continue
            reads.append(node)
    return reads


def _binding_scope(target: cst.Name, scopes: dict, name: str):  # type: ignore[no-untyped-def, type-arg]
    for scope in {s for s in scopes.values() if s is not None}:
        if any(a.node is target for a in scope.assignments[name]):
            return scope
        for access in scope.accesses[name]:
            if access.node is target:
                referents = [r.scope for r in access.referents if getattr(r, "scope", None) is not None]
                if referents:
                    return referents[0]
    raise Refused(f"`{name}` has no binding the variant can see")


def _check_write(node: cst.CSTNode, kind: str, call: cst.Call, parents: dict) -> None:  # type: ignore[type-arg]
    parent = parents.get(node)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List)):
        parent = parents.get(parent)  # `total, correct = 0.0, 0`: unpacked into a plain binding
    if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AnnAssign) and parent.target is node):
        return  # a plain (re)binding: `total = 0`, `losses = []`
    if isinstance(parent, cst.AugAssign) and kind == "accumulated" and isinstance(parent.operator, (cst.AddAssign, cst.SubtractAssign)):
        return
    what = type(parent).__name__ if parent is not None else "?"
    raise Refused(f"`{getattr(node, 'value', '?')}` is also bound or changed by a {what} the variant cannot follow")


def _reads_elements(node: cst.Name, call: cst.Call, parents: dict, name: str) -> bool:  # type: ignore[type-arg]
    """For a kept list: whether this use reads its elements (wrap it), skipping the uses that
    do not; Refused for a use that adds elements or aliases the list."""
    parent = parents.get(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        method = parent.attr.value
        outer = parents.get(parent)
        if method == "append" and isinstance(outer, cst.Call) and any(a.value is call or _holds(a.value, call) for a in outer.args):
            return False  # the rewritten append
        if method in ADDING:
            raise Refused(f"`{name}.{method}(...)` elsewhere adds values the variant did not keep on the device")
        return method not in NOT_READING
    if isinstance(parent, cst.Arg) and isinstance(parents.get(parent), cst.Call):
        outer = parents[parent]
        if isinstance(outer.func, cst.Name) and outer.func.value == "len":
            return False  # the count, not the values
        if isinstance(outer.func, cst.Attribute) and outer.func.attr.value in STORING:
            raise Refused(f"`{name}` is stored in another container: the alias would hold unread tensors")
        return True
    if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.Return, cst.Yield, cst.Element, cst.DictElement, cst.Lambda)):
        raise Refused(f"`{name}` is aliased ({type(parent).__name__}): the alias would hold unread tensors")
    if isinstance(parent, cst.AugAssign):
        raise Refused(f"`{name}` is extended with `{name} += ...`")
    return True


def _holds(expr: cst.CSTNode, call: cst.Call) -> bool:
    stack = [expr]
    while stack:
        node = stack.pop()
        if node is call:
            return True
        stack.extend(node.children)
    return False


def _paren(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
