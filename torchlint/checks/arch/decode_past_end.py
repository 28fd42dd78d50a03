"""A decode loop that runs to its full length with no exit, though its function knows where a sequence ends (EOS)."""

from __future__ import annotations

import re

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.decoding import mentions
from torchlint.analysis.impact import Cost
from torchlint.analysis.loop_shapes import counted_range
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

# Names of a sequence's end: `eos_id`, `self.tokenizer.eos_token_id`, `eot`, `stop_token`, `end_id`.
_END = re.compile(r"(^|_)(eos|eot|eom)(_|$)|^(stop|end)_(token|id|token_id)s?$|endoftext", re.IGNORECASE)
# Names a `while` test tracks finished sequences with (`while not done.all():`, `unfinished.max() > 0`).
_FINISHED = re.compile(r"done|finish|eos|stop|ended|alive|active|complete", re.IGNORECASE)
# What leaves a loop before its end (a generator's consumer may stop it too: `yield`).
_EXITS = (cst.Break, cst.Return, cst.Raise, cst.Yield)
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


class DecodePastEnd(Check):
    """A decode loop with no exit once every sequence has emitted EOS, whose output is cut at EOS afterwards: every generation pays the full length."""

    code = "TL410"
    name = "decode-past-end"
    cost = Cost.DECODE_PAST_END
    message = ("{loop} decodes a token per pass to its full length with no exit, though `{function}` knows where a "
               "sequence ends (`{end}`): once every row has ended, the remaining passes decode tokens it throws away")
    fix_hint = ("Stop when every row has ended: keep a `done` mask on the device (`done |= next_token == eos_id`) and "
                "check `if done.all(): break` every k tokens (one read per k tokens, k = 8-32), not per token")

    def visit_For(self, node: cst.For) -> None:
        self._visit_loop(node)

    def visit_While(self, node: cst.While) -> None:
        self._visit_loop(node)

    def _visit_loop(self, loop: cst.For | cst.While) -> None:
        ctx = self.ctx
        if not ctx.loops.decodes(loop) or ctx.loops.denoises(loop):
            return  # no token loop: a denoising loop runs a fixed number of steps by design
        function = ctx.tree.enclosing_function(loop)
        if function is None:
            return  # module code: no function to say where a sequence ends
        outer = self._outermost(loop, function)
        if outer is not loop:
            if id(outer) in self._seen:
                return  # one finding per nest of loops
            # A token per pass of an inner loop (audiolm's one per quantizer within a time step): the loop
            # that runs to the full length is the outer one, where an exit on EOS would go.
            self._seen.add(id(outer))
            loop = outer
        if type(loop) is cst.While and _tracks_finished(loop.test):
            return  # `while not done.all():` stops once every row has ended
        count = counted_range(loop.iter) if type(loop) is cst.For else None
        if type(loop) is cst.For and count is None:
            return  # a loop over given items (prompts, a prompt's chunks) has their length, not a token budget
        if count is not None and self._input_length(count):
            return  # as many passes as an input has positions (audiolm's fine stage over the coarse tokens): no budget to stop short of
        if self._exits(loop):
            return  # a `break`/`return` (on EOS or not) leaves early; its per-token read is another rule's
        end = self._end_known(loop, function)
        if end is None:
            return  # no end token in the function: fixed-length sampling (pixels, frames, nanoGPT's generate)
        # How often a generation runs: every N steps of a training loop (samples for a log), in a loop of
        # this file (a chat loop, an evaluation over prompts: every generation, high), or by callers not
        # visible here (medium: each generation still pays).
        if ctx.loops.enclosing_loops(loop) and ctx.guards.rare(loop):
            where = Where.EVERY_N
        elif ctx.loops.enclosing_loops(loop) or self._called_in_a_loop(function):
            where = Where.INFER
        else:
            where = Where.ONCE
        header = loop.iter if type(loop) is cst.For else loop.test
        self.report(loop, where=where, related=(end,), function=function.name.value + "()",
                    loop=f"`{'for' if type(loop) is cst.For else 'while'} ... {short_code(ctx.module, header, limit=40)}`",
                    end=short_code(ctx.module, end, limit=50))

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._seen: set[int] = set()  # the outer loops already judged for a decode loop nested in them

    def _outermost(self, loop: cst.For | cst.While, function: cst.FunctionDef) -> cst.For | cst.While:
        """The outermost ``for`` over a count (``range(max_time_steps)``) of ``function`` around ``loop``, through
        such loops only (``loop`` itself where none is): a loop over given items (a loader's batches, prompts)
        runs whole generations, one per item, and is where the nest of decode loops stops."""
        outer = loop
        for ancestor in self.ctx.tree.ancestors(loop):
            if ancestor is function or type(ancestor) is cst.While:
                break
            if type(ancestor) is cst.For:
                if counted_range(ancestor.iter) is None:
                    break
                outer = ancestor
        return outer

    def _input_length(self, count: cst.Call) -> bool:
        """Is the count's bound an input's length (``range(n)`` with ``n = coarse_ids.shape[1] // q`` bound once, or
        ``range(x.shape[1])``): a stage that makes one token per position of what it was given, not a token budget?"""
        bound = count.args[1 if len(count.args) > 1 else 0].value
        if type(bound) is cst.Name:
            bindings = self.ctx.bindings.lookup(bound.value, bound)
            if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
                return False
            bound = bindings[0].value
        code = short_code(self.ctx.module, bound, limit=200)
        return ".shape" in code or ".size(" in code

    def _exits(self, loop: cst.For | cst.While) -> bool:
        """Does the loop's body hold a ``return``/``raise``/``yield``, or a ``break`` of this loop?"""
        tree = self.ctx.tree
        for node in tree.descendants(loop.body):
            if type(node) not in _EXITS:
                continue
            if any(type(a) in _SCOPES for a in _between(tree, node, loop)):
                continue  # in a nested function: not this loop's exit
            if type(node) is cst.Break and any(type(a) in (cst.For, cst.While) for a in _between(tree, node, loop)):
                continue  # leaves a nested loop only
            return True
        return False

    def _end_known(self, loop: cst.For | cst.While, function: cst.FunctionDef) -> cst.CSTNode | None:
        """The first name of an end token (``eos_id``) in the loop or after it in ``function``."""
        tree = self.ctx.tree
        start = tree.index(loop)
        for node in tree.descendants(function.body):
            if tree.index(node) < start or type(node) not in (cst.Name, cst.Attribute):
                continue
            name = node.value if type(node) is cst.Name else node.attr.value
            if _END.search(name) and tree.enclosing_function(node) is function:
                return node
        return None

    def _called_in_a_loop(self, function: cst.FunctionDef) -> bool:
        """Is ``function`` called by name in a loop of this file (a chat loop, a loop over prompts)?"""
        name = function.name.value
        for call in self.ctx.tree.nodes(cst.Call):
            called = dotted(call.func) or ""
            # (a call within the function itself is no caller's loop)
            if called.rsplit(".", 1)[-1] == name and self.ctx.loops.enclosing_loops(call) \
                    and self.ctx.tree.enclosing_function(call) is not function:
                return True
        return False


def _tracks_finished(test: cst.BaseExpression) -> bool:
    """Does a ``while`` test read finished sequences (a name of them, or ``.all()``/``.any()``)?"""
    return any(_FINISHED.search(name) or name.rsplit(".", 1)[-1] in ("all", "any") for name in mentions(test))


def _between(tree, node: cst.CSTNode, top: cst.CSTNode) -> list[cst.CSTNode]:
    """The ancestors of ``node`` below ``top``."""
    found = []
    parent = tree.parent(node)
    while parent is not None and parent is not top:
        found.append(parent)
        parent = tree.parent(parent)
    return found
