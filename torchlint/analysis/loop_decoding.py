"""Decode and denoising loops: one token, frame or diffusion step per iteration, and the loops
around a whole generation (a part of ``Loops``; the loop shapes themselves: ``analysis/decoding.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.beam_prune import prunes_a_beam
from torchlint.analysis.decoding import decodes, runs_generate
from torchlint.analysis.denoising import denoises
from torchlint.analysis.loop_shapes import model_sampling
from torchlint.analysis.names import dotted
from torchlint.analysis.prefix import PrefixRerun, concatenated, reruns_prefix
from torchlint.analysis.subtree_calls import OWN

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class DecodeLoops:
    """Which loops of one file decode or denoise, memoised per loop."""

    ctx: FileContext

    def decodes(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` a decode loop: one token (frame, sample, denoising step) from a model
        per iteration, the model's type known or not (``analysis/decoding.py``)? Memoised."""
        known: dict[int, bool] = self.__dict__.setdefault("_decodes", {})
        if id(loop) not in known:
            known[id(loop)] = self._decodes_by_shape(loop) and not self._around_token_loop(loop)
        return known[id(loop)]

    def _decodes_by_shape(self, loop: cst.CSTNode) -> bool:
        """Does ``loop``, with what runs in the loops inside it, decode, sample or denoise? Memoised."""
        known: dict[int, bool] = self.__dict__.setdefault("_decodes_by_shape_of", {})
        if id(loop) not in known:
            # (a beam search over a score tensor's frames decodes whatever runs the model: `analysis/beam_prune.py`)
            known[id(loop)] = type(loop) in (cst.For, cst.While) and (decodes(self.ctx, loop) or self._samples(loop) or self.denoises(loop)
                                                                     or prunes_a_beam(self.ctx, loop))
        return known[id(loop)]

    def _around_token_loop(self, loop: cst.For | cst.While) -> bool:
        """Does ``loop`` hold the token loop rather than be one: no model run in its own body, a
        decode loop nested in it (bark's sliding window, ``for _ in range(n_window_steps):`` around
        ``for _ in range(sliding_window_len): logits = model(x)``)? Its iterations are windows or
        sequences, each of many tokens."""
        if any(self.is_step_call(call) for call in self.own_calls(loop.body, OWN)):
            return False
        # (directly around it: the token loop's nearest enclosing loop is this one; a loop over a dataset's images
        # around a loop of rows around the token loop is neither)
        return any(type(inner) in (cst.For, cst.While) and inner is not loop and self._nearest_loop(inner) is loop and self.decodes(inner)
                   for inner in self.ctx.tree.descendants(loop.body))

    def _nearest_loop(self, inner: cst.CSTNode) -> cst.CSTNode | None:
        """The nearest ``for``/``while`` statement around ``inner``."""
        return next((each for each in self.enclosing_loops(inner) if type(each) in (cst.For, cst.While)), None)

    def reruns_prefix(self, loop: cst.CSTNode) -> PrefixRerun | None:
        """The model call of decode loop ``loop`` given the whole sequence the loop grows, with
        no cache: every token re-runs the prefix (``analysis/prefix.py``)."""
        return reruns_prefix(self.ctx, loop) if type(loop) in (cst.For, cst.While) else None

    def denoises(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` a denoising loop: one diffusion time step per iteration, the model's
        output the next input, no token sampled (``analysis/decoding.py``)? Memoised."""
        known: dict[int, bool] = self.__dict__.setdefault("_denoises", {})
        if id(loop) not in known:  # a loop that samples tokens from logits decodes them: its steps are tokens
            # (a loop directly around a denoising loop goes over windows or generations, each of many steps, whatever
            # its own body feeds back: SV4D's `for t0 in ...:` conditioning each frame window on the last one's images)
            known[id(loop)] = denoises(self.ctx, loop) and not (decodes(self.ctx, loop) or self._samples(loop)) \
                and not (type(loop) in (cst.For, cst.While) and self._around_token_loop(loop))
        return known[id(loop)]

    def _samples(self, loop: cst.CSTNode) -> bool:
        """A sampling loop by its calls: it samples (``torch.multinomial``) from a model in it,
        or feeds the model's output back into its input (:meth:`_feeds_back`)."""
        calls = self.loop_calls(loop)
        sampled = model_sampling([(dotted(c.func.value) if type(c.func) is cst.Attribute else None, self.ctx.method_name(c)) for c in calls])
        if sampled - {"generate"} and any(self.is_step_call(c) for c in calls):
            # (a `torch.multinomial` loop with no model in it, over a mask on the host, samples no tokens; a store's
            # draw is no model's sample: consistency_models' training micro-batch loop, `self.schedule_sampler.sample(n)`)
            return True
        return self._feeds_back(loop, calls)

    def _feeds_back(self, loop: cst.CSTNode, calls: list[cst.Call]) -> bool:
        """A decode loop, greedy too: the model's input grows by what it made
        (``idx = torch.cat((idx, next_token), dim=1)`` with ``model(idx)`` in the same loop),
        one token or frame per iteration: an inference step, not an evaluation batch."""
        ctx = self.ctx
        grown = set(concatenated(ctx, calls))
        if not grown:
            return False  # nothing grows: no walk of the body (most loops)
        for node in self._loop_nodes(loop):  # `x = out[:, -max_seq_len:]`: the window the model sees
            if grown and type(node) is cst.Assign and len(node.targets) == 1 and type(node.value) is cst.Subscript and dotted(node.value.value) in grown:
                grown.add(dotted(node.targets[0].target))
        model_calls = [c for c in calls if dotted(c.func) == "self" or self.is_step_call(c)]  # `self(idx)`: the class's own forward
        return bool(grown) and any(dotted(a.value) in grown for c in model_calls for a in c.args)

    def runs_generations(self, loop: cst.CSTNode) -> bool:
        """A loop that calls ``.generate()`` (fairseq's ``for sample in itr: hypos =
        generator.generate(model, sample)``), or around a token loop of its own (``_around_token_loop``):
        an inference step per iteration, a whole generation or window (its tokens decoded inside), not one token."""
        return type(loop) in (cst.For, cst.While) and (any(
            runs_generate(self.ctx, n) for n in self.loop_calls(loop)) or self._decodes_by_shape(loop) and self._around_token_loop(loop))

    def _within_decode(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` inside a decode loop of its function, training nothing (a beam search's
        ``for hyp in hyps:``, each hypothesis scored by the model)? The decoded token is the
        step; the hypotheses repeat within it."""
        outer = [enclosing for enclosing in self.enclosing_loops(loop) if type(enclosing) in (cst.For, cst.While)]
        if not outer:
            return False
        ctx = self.ctx
        if any(type(n) is cst.Call and (ctx.method_name(n) == "backward" or ctx.method_name(n) == "step" and self.is_step_call(n))
               for n in self._loop_nodes(loop)):
            return False
        return any(self.decodes(enclosing) for enclosing in outer)

    def around_decoding(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` call a function of this file that runs a decode loop of its own, itself
        or through the functions of this file it calls (gpt-fast's ``for i in range(num_samples):
        y = generate(...)``, whose ``decode_n_tokens`` loops over tokens)? Then each of its
        iterations is a whole generation, and the decode loop is the step."""
        if type(loop) is not cst.For or self.decodes(loop):
            return False  # (a `while` loop is the token loop itself: speculative decoding's `while pos < n:` around its draft loop)
        return self.hot_decoding_anywhere() and any(type(node) is cst.Call and self._decodes_within(node, 0) for node in self.ctx.tree.descendants(loop))

    def hot_decoding_anywhere(self) -> bool:
        """Is any loop of the file a hot decode loop (``is_hot`` and ``decodes``)? Where none is, no
        statement runs a generation after another (``StepPositions._decoding_after``): asked once per
        file, not answered by a scan of the statements after each read. Memoised; True while it is found."""
        known: bool | None = self.__dict__.get("_hot_decoding_anywhere")
        if known is None:
            self.__dict__["_hot_decoding_anywhere"] = True  # (asked again while found: the scan decides)
            tree = self.ctx.tree
            known = self.__dict__["_hot_decoding_anywhere"] = any(
                self.is_hot(loop) and self.decodes(loop) for loop in (*tree.nodes(cst.For), *tree.nodes(cst.While)))
        return known

    def decodes_within(self, call: cst.Call) -> bool:
        """Does ``call`` run a function of this file that decodes, itself or through the
        functions of this file it calls (a whole generation per call)?"""
        # (only a hot decode loop makes a function decode: a file with none answers at once)
        return self.hot_decoding_anywhere() and self._decodes_within(call, 0)

    def _decodes_within(self, call: cst.Call, depth: int) -> bool:
        function = self.ctx.functions.called(call, None if type(call.func) is cst.Attribute else self.ctx.qname(call.func))
        if function is None or depth > 1:
            return False  # (two levels of this file's functions: generate -> decode_n_tokens)
        known: dict[int, bool] = self.__dict__.setdefault("_decoding_functions", {})
        if id(function) not in known:
            known[id(function)] = False  # recursion ends here
            nodes = list(self.ctx.tree.descendants(function))
            known[id(function)] = any(type(n) in (cst.For, cst.While) and self.is_hot(n) and self.decodes(n) for n in nodes) \
                or any(type(n) is cst.Call and self._decodes_within(n, depth + 1) for n in nodes)
        return known[id(function)]
