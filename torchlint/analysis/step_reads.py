"""Reads that follow another read of the same pass (a part of ``StepPositions``): the first read
of a loop's pass waits for the device's queue; a read after it in the same statement, or in the
branch its test chose (in a pass that does not repeat within its step, or over a step's logged values:
anywhere after it), with only small ops between (no model, helper, backward or step, no loop),
waits only for its own small kernels; so does the very value read again in a later statement of
any pass, its names not rebound and only host calls between (``_rebound_between``). The reads are
the nodes the file's wait findings stand at (``note_reads``: the engine hands them over, whatever
check found them), and the calls that read (``read_value``)."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Iterable

import libcst as cst

from torchlint.analysis.positions import plain_code
from torchlint.analysis.step_syncs import read_value
from torchlint.analysis.subtree_calls import COMPREHENSIONS

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Torch ops a read after them would wait for as for a model's work: not the small kernels of a pass.
_HEAVY_OPS = frozenset({"matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "conv1d", "conv2d", "conv3d", "linear",
                        "scaled_dot_product_attention", "cdist", "fft", "stft", "istft", "lstm", "gru"})
# `torch.nn.functional`'s elementwise losses: a reduction over tensors the step already made, not a layer's work
# (not `cross_entropy`, `nll_loss`, `kl_div`: over a vocabulary's logits they are work of their own).
_SMALL_FUNCTIONAL = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                               "binary_cross_entropy_with_logits"})
# Where a statement's part runs only on some passes: a read inside one of these may not have run.
_BRANCH_BLOCKS = (cst.IndentedBlock, cst.Else, cst.ExceptHandler, cst.Finally, cst.SimpleStatementSuite)
# Where a part runs on other passes than its surroundings' (or not at all): loops, scopes, comprehensions.
_SCOPES_AND_LOOPS = frozenset({cst.For, cst.While, cst.FunctionDef, cst.Lambda}) | COMPREHENSIONS


class StepReads:
    """Reads right after another read of the same pass (``Position.AFTER_READ``)."""

    ctx: FileContext

    def note_reads(self, nodes: Iterable[cst.CSTNode], uploads: Iterable[cst.CSTNode] = ()) -> None:
        """The nodes the file's findings of a wait stand at (a read, a truth test, a slice by a device scalar);
        ``uploads``: those of them that are a small blocking copy, not a read (an indexing with a host list)."""
        self._noted_reads = sorted({id(n): n for n in nodes}.values(), key=self.ctx.tree.index)
        self._noted_uploads = {id(n) for n in uploads}

    def _after_read(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is ``node``, a read, preceded in the same pass of its innermost loop (or its function) by
        another read that surely ran, with no model, helper, heavy op, backward, step or loop between?"""
        noted = getattr(self, "_noted_reads", ())
        if not noted or (read_value(self.ctx, node) is None and not any(n is node for n in noted)):
            return False
        tree = self.ctx.tree
        loop = self.ctx.loops.statement_loop(node)
        region = loop.body if loop is not None else tree.enclosing_function(node)
        if region is None or stop is not None and loop is not None and not tree.is_inside(loop, stop) and loop is not stop:
            return False
        # The noted reads before it, nearest first (in index order: a bisection, not a scan per read), from
        # the start of the outermost statement of ``region`` that holds it: a read that leads it stands in its
        # own statement or in the test of an ``if``/``while`` around it, both inside that one (a long step's
        # reads in the statements before are not asked again, one by one, for each read). In a pass that does
        # not repeat within its step (``_whole_pass``), any read before it in the region may lead it.
        whole = self._whole_pass(loop, stop) or self._step_pass(loop, stop) and not self._uploads(node)
        outermost = tree.statement_of(node)
        if whole:
            low = bisect.bisect_left(noted, tree.index(region), key=tree.index)
        elif outermost is not None and tree.is_inside(outermost, region):
            while (up := tree.statement_of(tree.parent(outermost))) is not None and tree.is_inside(up, region):  # type: ignore[arg-type]
                outermost = up
            low = bisect.bisect_left(noted, tree.index(outermost), key=tree.index)
        else:
            low = 0  # (its statement is not in the region: a loop's header, a one-line body; every read before it)
        step_pass = self._step_pass(loop, stop)
        for earlier in reversed(noted[low:bisect.bisect_left(noted, tree.index(node), key=tree.index)]):
            if not tree.is_inside(earlier, region) or tree.is_inside(node, earlier) or not (whole or self._leads(earlier, node)):
                continue
            if step_pass and not self._leads(earlier, node) and self._uploads(earlier):
                continue  # (an indexing with a host list, a factory's copy: in a group, each member waits for its own copy)
            if self._surely_before(earlier, node, region):
                return self._only_small_ops_between(earlier, node, region)
        if whole:
            return False
        # The same value read again in a later statement of the pass (the reads of the pass before the
        # outermost statement holding it, nearest first): its first read drained the queue for it.
        first = bisect.bisect_left(noted, tree.index(region), key=tree.index)
        if first == low:
            return False
        module = self.ctx.module
        codes = {plain_code(module, n): n for n in tree.descendants(node) if type(n) in (cst.Name, cst.Attribute, cst.Subscript)}
        values: dict[int, str | None] = self.__dict__.setdefault("_read_values", {})  # each read's value, asked by every read after it
        for earlier in reversed(noted[first:low]):
            if id(earlier) not in values:
                values[id(earlier)] = read_value(self.ctx, earlier)  # (None: a truth test or a slice, no one expression to match)
            again = codes.get(values[id(earlier)])  # type: ignore[arg-type]
            if again is not None and tree.is_inside(earlier, region) and self._surely_before(earlier, node, region):
                return not self._rebound_between(again, earlier, node) and self._only_host_calls_between(earlier, node) \
                    and self._only_small_ops_between(earlier, node, region)
        return False

    def _whole_pass(self, loop: cst.CSTNode | None, stop: cst.CSTNode | None) -> bool:
        """Is ``loop``'s pass one over the step's logged values (a loss dict's, `for key, values in losses.items()`),
        so that a read in a later statement, with only small ops since the one before, adds no wait? Not a loop over candidates, rows or tokens: reviews count each of
        their reads as a wait of its own (a beam's `.item()` per candidate)."""
        # (the step's own pass, `loop is stop`: `_step_pass`)
        return loop is not None and loop is not stop and self.ctx.places.repeat_of(loop).kind == "metric"

    def _step_pass(self, loop: cst.CSTNode | None, stop: cst.CSTNode | None) -> bool:
        """Is ``loop`` (None: no loop in its function) the step's own pass, run once per step: the hot loop's body,
        or the function the join runs per step? A read there after another of the pass, with only small ops
        between (PPO's `value_loss.item()` after `clip_fraction`'s, an `mse_loss` queued since), waits for those alone."""
        return stop is not None and (loop is stop or loop is None and type(stop) is cst.FunctionDef)

    def _uploads(self, node: cst.CSTNode) -> bool:
        """Is ``node`` a small blocking upload's finding rather than a read (caption's `seqs[incomplete_inds]`,
        one of seven indexings with a host list per token, each a copy the reviews count)?"""
        return id(node) in getattr(self, "_noted_uploads", ())

    def _in_a_repeated_pass(self, node: cst.CSTNode, stop: cst.CSTNode | None) -> bool:
        """Is ``node`` in a loop inside its step (``stop``), whose passes repeat within it?"""
        loop = self.ctx.loops.statement_loop(node)
        return loop is not None and loop is not stop and (stop is None or self.ctx.tree.is_inside(loop, stop))

    def _leads(self, earlier: cst.CSTNode, node: cst.CSTNode) -> bool:
        """Is ``earlier`` a read of ``node``'s own statement (``torch.cat((t[:n[i]], u[n[i] - 1:]))``), or the test of an
        ``if`` whose branch holds ``node`` (``if col == 0: ... else: mask[prev + 1:col + 1] = True``)? (Reads in
        statements one after another, a beam's ``.item()`` per candidate, keep their own tiers: each is a copy
        of its own, and reviews counted them as the waits they add up to.)"""
        tree = self.ctx.tree
        if tree.statement_of(earlier) is tree.statement_of(node):
            return True
        for above in tree.ancestors(earlier):
            if type(above) in (cst.If, cst.While):
                return (earlier is above.test or tree.is_inside(earlier, above.test)) and tree.is_inside(node, above.body if type(above) is cst.While else above)
            if isinstance(above, cst.BaseStatement):
                return False
        return False

    def _rebound_between(self, again: cst.CSTNode, earlier: cst.CSTNode, node: cst.CSTNode) -> bool:
        """Is a name of ``again`` (the value ``node`` reads again, StyleTTS2's ``lengths[i]`` of ``mels[i, :, :lengths[i]]``
        after ``int(lengths[i].item())``) bound again between the two reads (``i = j``, ``lengths = new``): another element?
        (Otherwise the first read drained the queue for that element: the second waits for its own copy only.)"""
        tree = self.ctx.tree
        names = {n.value for n in (again, *tree.descendants(again)) if type(n) is cst.Name}
        start = tree.statement_of(earlier) or earlier  # (`u = u.item()`: the first read's own statement rebinds `u`)
        for between in tree.preorder[tree.index(start):tree.index(node)]:
            if type(between) in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.NamedExpr) and any(
                    type(n) is cst.Name and n.value in names for n in (between.target, *tree.descendants(between.target))):
                return True
        return False

    def _only_host_calls_between(self, earlier: cst.CSTNode, node: cst.CSTNode) -> bool:
        """Is every call between the two reads (statements apart) host bookkeeping or another read, none that may
        queue work (a module the file cannot name as a model, ``nets.style(mel)``, still queues its forward)?"""
        tree = self.ctx.tree
        for between in tree.preorder[tree.index(earlier) + 1:tree.index(node)]:
            if type(between) is cst.Call and not tree.is_inside(between, earlier) and not tree.is_inside(node, between) \
                    and read_value(self.ctx, between) is None and not self._quiet(between):  # type: ignore[attr-defined]
                return False
        return True

    def _surely_before(self, earlier: cst.CSTNode, node: cst.CSTNode, region: cst.CSTNode) -> bool:
        """Did ``earlier`` run on every pass that runs ``node``: no branch, loop or scope holds it that does
        not hold ``node`` too (an ``if``'s test runs before either branch)?"""
        tree = self.ctx.tree
        if type(earlier) is cst.BooleanOperation:
            return False  # a test `dist == "normal" and (std < 0).any()`: its read may be short-circuited
        for above in tree.ancestors(earlier):
            if above is region:
                return True
            if type(above) in _SCOPES_AND_LOOPS \
                    or isinstance(above, _BRANCH_BLOCKS) or type(above) in (cst.BooleanOperation, cst.IfExp):
                if not tree.is_inside(node, above):
                    return False  # in a nested loop, a branch or a short-circuited operand that may not run
        return False

    def _only_small_ops_between(self, earlier: cst.CSTNode, node: cst.CSTNode, region: cst.CSTNode) -> bool:
        tree = self.ctx.tree
        if any(type(n) is cst.Call and self._heavy(n) for n in tree.descendants(node)):
            return False  # `(helper(out) / gain).tolist()`: the read's own value is work it waits for
        for above in tree.ancestors(earlier):  # the calls around the first read finish after it: `model(x[idx])`, then `y[idx]`
            if above is region or tree.is_inside(node, above):
                break
            if type(above) is cst.Call and self._heavy(above):
                return False
        # ``region``, a subtree, is one run of the pre-order: the nodes between the two reads are its slice
        # from one to the other (not a walk of the region from its start for each read).
        end = tree.index(node)
        if not tree.is_inside(node, region):  # a loop's header holds it: the region's nodes after the first read
            end = min(end, tree.index(region) + 1 + len(tree.descendants(region)))
        for between in tree.preorder[tree.index(earlier) + 1:end]:
            if tree.is_inside(between, earlier) or tree.is_inside(node, between):
                continue  # the first read's own operands, or a call around the read that finishes after it
            if type(between) in (cst.For, cst.While, cst.FunctionDef):
                return False  # a loop of ops adds up; a nested scope is not asked about
            if type(between) is cst.Call and self._heavy(between):
                return False
        return True

    def _heavy(self, call: cst.Call) -> bool:
        """A model, a helper of the project, a backward or step, or a heavy torch op: work a read waits for."""
        if self._may_queue(call) or self._runs_a_helper(call):  # type: ignore[attr-defined]
            return True
        name = (self.ctx.qname(call.func) or "").rsplit(".", 1)[-1] or self.ctx.method_name(call) or ""
        qualified = self.ctx.qname(call.func) or ""
        # (a loss of `torch.nn.functional` is one reduction over what the step made: a small op, `F.mse_loss(returns, values)`)
        return name in _HEAVY_OPS or qualified.startswith("torch.nn.functional.") and name not in _SMALL_FUNCTIONAL
