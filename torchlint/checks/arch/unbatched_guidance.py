"""Classifier-free guidance that runs its model twice per sampling step, where one call on a doubled batch would do."""

from __future__ import annotations

import bisect
import re

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.decoding import assignment_of, derived, mentions, may_run_a_model, targets
from torchlint.analysis.impact import Cost
from torchlint.analysis.model_free import runs_no_model
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import STEP_PLACEHOLDER, Check

# What names the unconditional (or negative) conditioning of a guided sampler: `uc`,
# `uncond`, `unconditional_conditioning`, `null_cond`, `negative_prompt_embeds`.
_UNCONDITIONAL = re.compile(r"(^|_)(uc|unc|uncond\w*|unconditional\w*|null\w*|neg|negative\w*|empty\w*)(_|$)")
# Values that cannot be concatenated into a batch with a tensor: the model is given "no
# condition" as a literal (`model(x, t, y=None)`), which needs a learned null embedding first.
_LITERALS = (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


class UnbatchedGuidance(Check):
    """`eps_c = model(x, t, c); eps_u = model(x, t, uc)` in a sampling step: two model calls where one on `torch.cat([x, x])` would do."""

    code = "TL409"
    name = "unbatched-guidance"
    cost = Cost.GUIDANCE_UNBATCHED
    per_step = True
    device_bound = True
    message = ("`{call}` in {loop} runs the model {how}, on the same inputs but the conditioning "
               "(`{cond}`{flag}): every layer's kernels launched twice at half the batch")
    flag_hint = ("Run both passes in one call on a doubled batch, `model(torch.cat([x, x]), ...).chunk(2)`: the model must first "
                 "take the unconditional choice per sample (a boolean mask over the batch in place of `{keyword}`, the null "
                 "conditioning used where it is set), since one keyword holds for the whole batch")
    fix_hint = ("Run both in one call on a doubled batch and split the result: `eps_u, eps_c = model(torch.cat([x, x]), "
                "torch.cat([t, t]), torch.cat([uc, c])).chunk(2)` (a dict of conditionings: concatenate each entry)")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if not _model_call(ctx, node) or ctx.tree.enclosing_function(node) is None and not ctx.loops.enclosing_loops(node):
            return  # a library function, a tensor method or a helper running no model; module code outside loops runs once
        loop = self._conditioning_loop(node)
        if loop is not None:
            # Placed where the pair loop runs: the two-item loop is no step of its own.
            condition, hot = ctx.loops.step_condition(loop), ctx.loops.local_hot_loop(loop)
            words = STEP_PLACEHOLDER if condition is not None or hot is None else ctx.loops.describe(hot)
            self.report(node, related=(loop,), condition=condition, placed_as=loop, loop=words, where=self._every_n(loop), call=short_code(ctx.module, node, limit=50),
                        how="once per item of `" + short_code(ctx.module, _header(loop).iter, limit=30) + "`",
                        cond=plain_code(ctx.module, _header(loop).target), flag="")
            return
        pair = self._earlier_pair(node)
        if pair is not None:
            first, cond, keyword = pair
            # (a keyword that switches the conditioning off holds for the whole batch: the fix is the model's too)
            self.report(node, related=(first,), where=self._every_n(node), call=short_code(ctx.module, node, limit=50),
                        how=f"a second time after `{short_code(ctx.module, first, limit=40)}`", cond=cond,
                        flag=(", keywords the model takes for the whole batch: batching needs them to take mixed ones" if "`" in keyword
                              else ", a keyword the model takes for the whole batch: batching needs it to take a mixed one") if keyword else "",
                        hint=self.flag_hint.format(keyword=keyword) if keyword else "")

    def _every_n(self, node: cst.CSTNode) -> Where | None:
        """Every N steps where the sampling loop running ``node`` sits under ``if step % N == 0:`` in
        a training loop (images sampled for a log): a small share of that run, as TL407 places it."""
        hot = self.ctx.loops.local_hot_loop(node)
        return Where.EVERY_N if hot is not None and self.ctx.loops.enclosing_loops(hot) and self.ctx.guards.rare(hot) else None

    def _earlier_pair(self, second: cst.Call) -> tuple[cst.Call, str, str] | None:
        """The call before ``second`` in its block, or in a block around it that runs it under an
        ``if`` (``if self.conditioning_free:``), that runs the same callee on the same arguments but
        one (the conditioning), the two results combined by a difference (``uncond + scale * (cond -
        uncond)``); with the argument that differs, and the keyword where a literal flag makes the
        difference (``model(x, t, conditioning_free=True, **kw)``, combined as a scaled difference)."""
        ctx = self.ctx
        tree = ctx.tree
        statement = assignment_of(ctx, second)
        if statement is None:
            return None  # the result is not kept: nothing for a guidance to combine
        callee = None  # the code of its function, made only where a kept call comes before it (most calls have none)
        for block in _blocks_running(ctx, tree.parent(tree.parent(statement))):
            for first, earlier in self._kept_calls().get(id(block), ()):
                if tree.index(first) >= tree.index(second):
                    break
                if earlier is not statement and callee is None:
                    callee = self._callee(second)
                if earlier is statement or self._callee(first) != callee:
                    continue  # another model (a refiner, an EMA copy): not one batch
                if self._arguments(first) == self._arguments(second):
                    continue  # the same arguments, as written: apart in nothing (a long body's `x = model(x)` on every line)
                one, other = targets(earlier, items=False), targets(statement, items=False)
                differing = _differing_argument(ctx, first, second)
                # (a guidance pair: one pass given a conditioning dropped, by its name or zeroed, or its output
                # named for one, and the two outputs combined as a guidance is: a difference scaled, a lerp.
                # Not a critic on two action sets, `q(s, pi_action)` against `q(s, actions)`: CORL's AWAC)
                guided = differing is not None and _guided_pair(ctx, first, second, earlier, statement)
                # (a keyword apart is a weaker sign than a tensor apart: the guidance's own combination,
                # a difference scaled, `u + s * (c - u)` or `(1 + k) * c - k * u`, must say what the pair is)
                flag = [] if guided else _differing_flag(ctx, first, second)
                if not guided and not flag:
                    continue  # apart in no conditioning: asked first, as the two scans below are per pair of a long body's calls
                if _depends_on(ctx, self._assignments(block), earlier, statement, second):
                    continue  # the second pass is given what the first returned (a PLMS warm-up's `x_pred`): one after the other
                if not _difference_of(ctx, block, one, other, scaled=True):
                    continue
                if guided:
                    return first, differing, ""  # type: ignore[return-value]
                keywords = [a.keyword.value for a in flag]  # type: ignore[union-attr]
                return first, ", ".join(f"{k}={plain_code(ctx.module, a.value)}" for k, a in zip(keywords, flag)), "` and `".join(keywords)
        return None

    def _arguments(self, call: cst.Call) -> tuple[tuple[str, str | None, str], ...]:
        """The code of ``call``'s arguments with their stars and keywords (made once per call: each
        kept call of a block is compared with every later one)."""
        known: dict[int, tuple[tuple[str, str | None, str], ...]] = self.__dict__.setdefault("_argument_codes", {})
        codes = known.get(id(call))
        if codes is None:
            codes = known[id(call)] = tuple((str(a.star), a.keyword.value if a.keyword is not None else None, plain_code(self.ctx.module, a.value))
                                            for a in call.args)
        return codes

    def _assignments(self, block: cst.CSTNode) -> tuple[list[int], list[cst.CSTNode]]:
        """The assignments under ``block``, in source order, with their pre-order indexes (made once
        per block: each pair of calls asks for those between them, a bisection, not a scan of the block)."""
        known: dict[int, tuple[list[int], list[cst.CSTNode]]] = self.__dict__.setdefault("_assigned", {})  # (blocks live as long as the check)
        found = known.get(id(block))
        if found is None:
            tree = self.ctx.tree
            nodes = [n for n in tree.descendants(block) if type(n) in (cst.Assign, cst.AnnAssign, cst.AugAssign)]
            found = known[id(block)] = ([tree.index(n) for n in nodes], nodes)
        return found

    def _callee(self, call: cst.Call) -> str:
        """The code of ``call``'s function: each kept call of a block is compared with every later one."""
        known: dict[int, str] = self.__dict__.setdefault("_callees", {})  # (the calls live as long as the check)
        code = known.get(id(call))
        if code is None:
            code = known[id(call)] = plain_code(self.ctx.module, call.func)
        return code

    def _kept_calls(self) -> dict[int, list[tuple[cst.Call, cst.CSTNode]]]:
        """The model calls whose results are assigned, with their assignments, by the block
        holding the assignment, in source order (made once per file)."""
        found = getattr(self, "_by_block", None)
        if found is None:
            ctx, found = self.ctx, {}
            for call in ctx.tree.nodes(cst.Call):
                statement = assignment_of(ctx, call) if _model_call(ctx, call) else None
                if statement is not None:
                    found.setdefault(id(ctx.tree.parent(ctx.tree.parent(statement))), []).append((call, statement))
            self._by_block = found
        return found

    def _conditioning_loop(self, call: cst.Call) -> cst.CSTNode | None:
        """The ``for cond in (c, uc):`` loop (or comprehension) whose variable ``call`` is given as
        one argument, over a literal pair that names an unconditional conditioning."""
        ctx = self.ctx
        loops = ctx.loops.enclosing_loops(call)
        loop = loops[0] if loops else None
        header = _header(loop)
        if header is None or getattr(header, "inner_for_in", None) is not None:
            return None  # no loop, or a comprehension over two iterables
        if type(header.target) is not cst.Name or type(header.iter) not in (cst.Tuple, cst.List):
            return None
        items = header.iter.elements
        if len(items) != 2 or not any(_UNCONDITIONAL.search(plain_code(ctx.module, e.value).lower()) for e in items):
            return None  # not a conditioned and an unconditional pass
        if any(plain_code(ctx.module, e.value) == "None" for e in items):
            return None  # `for y in (labels, None)`: the unconditional pass is given no tensor to batch with
        name = header.target.value
        given = [a for a in call.args if name in mentions(a.value)]
        return loop if len(given) == 1 and type(given[0].value) is cst.Name else None


def _differing_argument(ctx, first: cst.Call, second: cst.Call) -> str | None:  # type: ignore[no-untyped-def]
    """The one argument in which two calls of the same callee differ, as written in the second;
    None where they differ in none, in more than one, in their keywords, or where one of the
    two is a literal (`y=None`: nothing to concatenate a tensor with)."""
    if len(first.args) != len(second.args):
        return None
    differing: list[tuple[cst.Arg, cst.Arg]] = []
    for a, b in zip(first.args, second.args):
        if a.star or b.star or (a.keyword is None) != (b.keyword is None) or (a.keyword is not None and a.keyword.value != b.keyword.value):  # type: ignore[union-attr]
            return None  # `**kwargs` may differ too; keywords in another order are another call
        if plain_code(ctx.module, a.value) != plain_code(ctx.module, b.value):
            differing.append((a, b))
    if len(differing) != 1:
        return None  # the same call twice, or a call on another input (another state, another step)
    a, b = differing[0]
    if a is first.args[0] and a.keyword is None:
        return None  # the first argument differs: the state (`model(x, t, y)`, `model(x_prev, t, y)`), not the conditioning
    if any(type(arg.value) in _LITERALS and type(arg.value) is not cst.Name or plain_code(ctx.module, arg.value) == "None" for arg in (a, b)):
        return None
    return plain_code(ctx.module, b.value)


def _guided_pair(ctx, first: cst.Call, second: cst.Call, one: cst.CSTNode, other: cst.CSTNode) -> bool:  # type: ignore[no-untyped-def]
    """Does one of two calls apart in one argument drop the conditioning: that argument named as an
    unconditional, null or negative one (``uc``, ``y_null``, ``self.null_text_embed``), or zeroed
    (``torch.zeros_like(c)``, ``c * 0``), or the call's output named for one (``e_uncond``, ``null_logits``)?"""
    for a, b in zip(first.args, second.args):
        codes = (plain_code(ctx.module, a.value), plain_code(ctx.module, b.value))
        if codes[0] != codes[1] and any(_names_unconditional(code) or _zeroed(code) for code in codes):
            return True
    return any(_names_unconditional(name) for name in targets(one, items=False) | targets(other, items=False))


def _names_unconditional(code: str) -> bool:
    """Is a name in ``code`` one of an unconditional conditioning (``self.null_embed(x)``: ``null_embed``)?"""
    return any(_UNCONDITIONAL.search(word) for word in re.findall(r"[a-z_]\w*", code.lower()))


def _zeroed(code: str) -> bool:
    """``torch.zeros_like(c)``, ``c * 0``, ``c * 0.``: a conditioning zeroed for the unconditional pass."""
    return re.search(r"\bzeros(_like)?\(|\*\s*0(\.0*)?(?![\w.])", code) is not None


def _model_call(ctx, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """A call that may run a model, and not of a helper of the file that runs none (a table's gather)."""
    return may_run_a_model(ctx, call) and not runs_no_model(ctx, call)


def _depends_on(ctx, assignments: tuple[list[int], list[cst.CSTNode]], earlier: cst.CSTNode, statement: cst.CSTNode, second: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """Is ``second`` given what the call of ``earlier`` returned, directly or through names the
    statements between them (of the block's ``assignments``) bind from it (``x_pred = get_x_pred(x, noise_pred, t)``)?"""
    indexes, nodes = assignments
    between = nodes[bisect.bisect_right(indexes, ctx.tree.index(earlier)):bisect.bisect_left(indexes, ctx.tree.index(statement))]
    made = derived(between, targets(earlier, items=False), rounds=1)
    return any(mentions(arg.value) & made for arg in second.args)


def _differing_flag(ctx, first: cst.Call, second: cst.Call) -> list[cst.Arg]:  # type: ignore[no-untyped-def]
    """The keywords, given literals, in which two calls of the same callee differ (``model(x, t, **kw)``
    and ``model(x, t, conditioning_free=True, **kw)``; ``null_cond_prob=1.``; decision-diffuser's
    ``use_dropout=False`` in one, ``force_dropout=True`` in the other), where everything else is the
    same code (``*args`` and ``**kwargs`` too) but a cache each pass keeps (``cache=prev_cache``);
    none otherwise."""
    def keywords(call: cst.Call) -> dict[str, cst.Arg]:
        return {a.keyword.value: a for a in call.args if a.keyword is not None}

    def rest(call: cst.Call, skip: set[str]) -> list[str]:
        return [a.star + plain_code(ctx.module, a.value) for a in call.args if a.keyword is None] \
            + sorted(f"{a.keyword.value}={plain_code(ctx.module, a.value)}" for a in call.args
                     if a.keyword is not None and a.keyword.value not in skip)

    ones, others = keywords(first), keywords(second)
    apart = {k for k in ones.keys() | others.keys() if k not in ones or k not in others
             or plain_code(ctx.module, ones[k].value) != plain_code(ctx.module, others[k].value)}
    flags = [k for k in apart if _literal(ctx, (others.get(k) or ones[k]).value) and _literal(ctx, (ones.get(k) or others[k]).value)]
    # (each pass of a cached decode keeps its own cache: `cache=cache` and `cache=prev_cache` are no conditioning)
    caches = {k for k in apart if k in ones and k in others and any(w in k.lower() for w in ("cache", "past"))}
    if not flags or apart - caches != set(flags) or rest(first, apart) != rest(second, apart):
        return []
    return [others.get(k) or ones[k] for k in sorted(flags, key=lambda k: (k not in ones, k))]


def _literal(ctx, expr: cst.BaseExpression) -> bool:  # type: ignore[no-untyped-def]
    """``True``, ``None``, ``1.``, ``"null"``: a value the model is told, not a tensor it is given."""
    return type(expr) in _LITERALS and (type(expr) is not cst.Name or expr.value in ("True", "False", "None")) \
        or type(expr) is cst.UnaryOperation and type(expr.expression) in (cst.Integer, cst.Float)


def _blocks_running(ctx, block: cst.CSTNode) -> list[cst.CSTNode]:  # type: ignore[no-untyped-def]
    """``block`` and the blocks around it from which it runs under an ``if`` whose test holds (its body,
    not an ``else``: an ``if``/``else`` runs one call or the other, not both), up to a loop or a function."""
    found = [block]
    while type(parent := ctx.tree.parent(block)) is cst.If and parent.body is block and type(outer := ctx.tree.parent(parent)) is cst.IndentedBlock:
        found.append(outer)
        block = outer
    return found


def _difference_of(ctx, block: cst.CSTNode, one: set[str], other: set[str], scaled: bool = False) -> bool:  # type: ignore[no-untyped-def]
    """Does ``block`` subtract a value made from ``one`` from one made from ``other`` (or the reverse)?
    ``scaled``: a difference multiplied (``u + s * (c - u)``), or one of two products (``(1 + k) * c - k * u``)."""
    if not one or not other or one & other:
        return False
    for call in ctx.tree.nodes(cst.Call):  # `torch.lerp(e_u, e_c, scale)`: the scaled difference in one op
        if len(call.args) == 3 and ctx.qname(call.func) == "torch.lerp" and ctx.tree.is_inside(call, block):
            pair = mentions(call.args[0].value), mentions(call.args[1].value)
            if pair[0] & one and pair[1] & other or pair[0] & other and pair[1] & one:
                return True
    for op in ctx.tree.nodes(cst.BinaryOperation):
        if type(op.operator) is not cst.Subtract or not ctx.tree.is_inside(op, block):
            continue
        left, right = mentions(op.left), mentions(op.right)
        if (left & one and right & other) or (left & other and right & one):
            if not scaled or _scaled(ctx, op):
                return True
    return False


def _scaled(ctx, op: cst.BinaryOperation) -> bool:  # type: ignore[no-untyped-def]
    parent = ctx.tree.parent(op)
    if type(parent) is cst.BinaryOperation and type(parent.operator) is cst.Multiply:
        return True
    return all(type(side) is cst.BinaryOperation and type(side.operator) is cst.Multiply for side in (op.left, op.right))


def _header(loop: cst.CSTNode | None) -> cst.For | cst.CompFor | None:
    """What a ``for`` statement or a comprehension iterates, and its variable."""
    return loop if type(loop) is cst.For else getattr(loop, "for_in", None)  # type: ignore[return-value]
