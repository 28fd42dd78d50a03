"""Loop context: which loop a node runs in, and whether that loop is a hot (per-step) loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.decoding import decodes, denoises
from torchlint.analysis.functions import dotted_function_name
from torchlint.analysis.guard_shapes import none_tested
from torchlint.analysis.impact import FULL_BATCH_WORDS, LOOP_WORDS, Where
from torchlint.analysis.names import dotted, is_range
from torchlint.analysis.positions import plain_code
from torchlint.analysis.prefix import PrefixRerun, concatenated, reruns_prefix
from torchlint.analysis.subtree_calls import IN_SCOPE, OWN, STEP, SubtreeCalls
from torchlint.analysis.tree import node_types
from torchlint.analysis.values import MODULE_CHAIN, Kind, looks_like_optimizer

if TYPE_CHECKING:
    from torchlint.analysis.bindings import Binding
    from torchlint.analysis.context import FileContext

Loop = cst.For | cst.While | cst.CompFor
_SCOPE_BARRIERS = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_BARRIER_TYPES = node_types(*_SCOPE_BARRIERS)
_COMPREHENSION_TYPES = node_types(*_COMPREHENSIONS)
_NESTED_LOOP_OR_SCOPE = node_types(cst.For, cst.While, *_SCOPE_BARRIERS, *_COMPREHENSIONS)
# Wrappers that iterate what they wrap: for i, (x, y) in enumerate(tqdm(loader)).
_SAMPLING = frozenset({"generate", "sample", "multinomial"})
_EVAL_WORDS = ("eval", "valid", "test", "infer", "predict")
_ITER_WRAPPERS = {"enumerate", "zip", "tqdm", "iter", "trange", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "progress_bar", "track"}


def _body_children(loop: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The parts of a loop that run once per iteration."""
    if isinstance(loop, (cst.For, cst.While)):
        return (loop.body,) if isinstance(loop, cst.For) else (loop.body, loop.test)
    return ()


_BACKWARD, _OPTIMIZER = 1, 2  # the parts of a training step a function runs


def _slices_a_batch(loop: cst.CSTNode) -> bool:
    """``for i in range(0, batch.shape[0], micro)``: a range with a step, over one batch."""
    if type(loop) is not cst.For or type(loop.iter) is not cst.Call:
        return False
    func = loop.iter.func
    return type(func) is cst.Name and func.value == "range" and len(loop.iter.args) == 3


class Loops:
    """Loop nesting and hot-loop facts of one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._hot: dict[int, bool] = {}
        self._described: dict[int, Where] = {}  # a loop's description: one walk of it, however many findings it holds
        self._trains: dict[int, int] = {}  # id(def) -> the step parts it runs (see _calls_a_trainer)
        self._loop_keys: dict[int, str] = {}
        self._step_calls: dict[int, bool] = {}
        self._hot_loops: dict[int, cst.CSTNode | None] = {}
        self._enclosing: dict[int, list[cst.CSTNode]] = {}
        self._trainer_calls: dict[int, bool] = {}
        self._finding_parts = 0  # functions whose step parts are being found (see _calls_a_trainer)

    def enclosing_loops(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """Loops (For/While, or comprehensions) whose per-iteration part holds ``node``.

        Innermost first; stops at the enclosing function, class or lambda. Asked of most
        calls by several analyses (the places, the summary, the guards): remembered per
        node. Do not change the list.
        """
        known = self._enclosing.get(id(node))
        if known is None:
            known = self._enclosing[id(node)] = self._enclosing_loops(node)
        return known

    def _enclosing_loops(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        loops: list[cst.CSTNode] = []
        child = node
        for ancestor in self.ctx.tree.ancestors(node):
            # Type sets, not isinstance: this runs for every ancestor of most calls and names.
            ancestor_type = type(ancestor)
            if ancestor_type in _BARRIER_TYPES:
                if ancestor_type is cst.Lambda and self._mapped(ancestor):
                    child = ancestor  # `map(lambda t: t.item(), ts)`: run right here, once per item
                    continue
                break
            if ancestor_type is cst.For or ancestor_type is cst.While:
                if any(child is part for part in _body_children(ancestor)):
                    loops.append(ancestor)
            elif ancestor_type in _COMPREHENSION_TYPES:
                first = ancestor.for_in
                if child is not first or self._inside_comp_body(node, first):
                    loops.append(ancestor)
            child = ancestor
        return loops

    def _mapped(self, function: cst.Lambda) -> bool:
        """Is ``function`` the first argument of ``map(...)``, which calls it where it stands?"""
        arg = self.ctx.tree.parent(function)
        call = self.ctx.tree.parent(arg) if type(arg) is cst.Arg else None
        return type(call) is cst.Call and type(call.func) is cst.Name and call.func.value == "map" \
            and self.ctx.qname(call.func) is None and call.args[0] is arg

    def _inside_comp_body(self, node: cst.CSTNode, comp_for: cst.CompFor) -> bool:
        # The first `for`'s iterable is evaluated once; its ifs and inner fors each time.
        return not (node is comp_for.iter or self.ctx.tree.is_inside(node, comp_for.iter))

    def in_loop(self, node: cst.CSTNode) -> bool:
        return bool(self.enclosing_loops(node))

    def hot_loop(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """Where ``node`` runs once per step: the innermost enclosing hot loop; else the
        enclosing function, which runs per step if the project-wide join finds it called
        from a hot loop or by a framework (a finding there is kept only then: see
        :meth:`step_condition`); at module level, the innermost ``for``/``while``, which the
        join may find to be a step loop (its body calls a model of another module); None
        for module-level code outside loops."""
        return self.local_hot_loop(node) or self.ctx.tree.enclosing_function(node) or self.statement_loop(node)

    def local_hot_loop(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The innermost enclosing hot loop of the same function, or None."""
        key = id(node)
        if key in self._hot_loops:  # asked of a finding's node by the engine, the places and the summary
            return self._hot_loops[key]
        enclosing = self.enclosing_loops(node)
        found = next((loop for loop in enclosing if self.is_hot(loop)), None)
        if found is None:
            # in a loop of per-epoch work beside the epoch's batch loop: once per epoch (the epoch
            # loop's own statements are not placed here: one read per epoch is the sync rules' fix)
            found = next((epoch for loop in enclosing if (epoch := self._epoch_around(loop)) is not None), None)
        self._hot_loops[key] = found
        return found

    def around_batches(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` an epoch loop whose body holds the loop over its batches (``for epoch in
        range(n): for batch in loader: ...``)? Its own code, outside that loop, runs once per
        epoch: :meth:`where` says ``EPOCH``. Memoised."""
        known: dict[int, bool] = self.__dict__.setdefault("_around_batches", {})
        if id(loop) not in known:
            training = {id(each) for each in self.training_loops()}
            known[id(loop)] = _epoch_loop(loop) and not self._steps_once(loop) and any(
                type(inner) in (cst.For, cst.While) and (self._iterates_loader(inner) or id(inner) in training)
                for inner in self._loop_nodes(loop))
        return known[id(loop)]

    def per_epoch(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` work an epoch loop does once per epoch beside its batches, over no loader
        and training nothing (StyleTTS2's ``for bib in range(len(d_en)): ... writer.add_audio(...);
        if bib >= 5: break`` after its validation pass: a few samples sampled and logged)? It is
        no step loop, whatever model it calls: what it repeats repeats once per epoch."""
        return self._epoch_around(loop) is not None

    def _epoch_around(self, loop: cst.CSTNode) -> cst.CSTNode | None:
        """The epoch loop (:meth:`around_batches`) that runs per-epoch loop ``loop``, or None."""
        if type(loop) not in (cst.For, cst.While):
            return None
        epoch = None
        for outer in self.enclosing_loops(loop):
            if type(outer) not in (cst.For, cst.While):
                continue
            if self.around_batches(outer):
                epoch = outer
                break
            if self._iterates_loader(outer) or not _counts(outer):
                # inside an evaluation pass over a loader, or over what may be one (`for batch in
                # val_pbar:` with `val_pbar = tqdm(val_loader)`): within its steps. Only a count
                # (`for bib in range(len(d_en)):`) repeats once per epoch around it
                return None
        if epoch is None or self._iterates_loader(loop) or not _counts(loop):
            return None  # (`for batch in val_pbar:` is a pass over batches, however its loader is named)
        ctx = self.ctx
        if any(type(n) is cst.Call and (ctx.method_name(n) == "backward" or ctx.method_name(n) == "step" and self.is_step_call(n) or self._calls_a_trainer(n))
               for n in self._loop_nodes(loop)):
            return None  # it trains: a step loop of its own
        return epoch

    def step_condition(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """What must run every step for ``node`` to: None when a hot loop around it already
        says so (or it is module-level code outside loops); else its innermost ``for``/``while``
        loop, which runs every step when its function does or when the project-wide join finds
        its own body calling a model or a training step of another module; else its function."""
        if self.local_hot_loop(node) is not None:
            return None
        loop = self.statement_loop(node)
        if loop is None:
            branch = self.ctx.guards.default_branch(node)
            if branch is not None:
                return branch[0]  # runs when a per-step caller leaves the parameter out
        return loop or self.ctx.tree.enclosing_function(node)

    def module_forward(self, node: cst.CSTNode) -> str | None:
        """``Cls.forward`` where ``node`` sits in the ``forward`` of an ``nn.Module`` class of
        this file: code that runs on every call of the model,
        whether or not a step that calls it is visible; else None."""
        function = self.ctx.tree.enclosing_function(node)
        if function is None or function.name.value != "forward":
            return None
        cls = self.ctx.tree.enclosing_class(function)
        if cls is None or self.ctx.tree.parent(self.ctx.tree.parent(function)) is not cls or not self.ctx.is_module_class(cls.name.value):
            return None
        return f"{cls.name.value}.forward"

    def within_forward(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` run within each call of a model (in a method its ``forward`` calls),
        not as a decode loop of a generator module?"""
        return self.runs_in_forward(self.ctx.tree.enclosing_function(loop)) and not self.decodes(loop)

    def runs_in_forward(self, function: cst.FunctionDef | None) -> bool:
        """Is ``function`` the ``forward`` of an ``nn.Module`` class of this file, or a method
        that forward calls through ``self.m(...)`` (segment-anything's ``MaskDecoder.forward``
        calls ``self.predict_masks``), directly or through other such methods? Its loops run
        within each call of the model."""
        if function is None:
            return False
        if not hasattr(self, "_in_forward"):
            self._in_forward = self._forward_methods()
        return id(function) in self._in_forward

    def in_class_forward(self, function: cst.FunctionDef | None) -> bool:
        """``runs_in_forward`` for a class of any base: its ``forward``, or a method that forward
        calls through ``self``. Whether the class is a module may only show in another file
        (``class CascadeROIHeads(StandardROIHeads)``): the join decides that."""
        if function is None:
            return False
        if not hasattr(self, "_in_class_forward"):
            self._in_class_forward = self._forward_methods(modules_only=False)
        return id(function) in self._in_class_forward

    def _forward_methods(self, modules_only: bool = True) -> set[int]:
        ctx, calls = self.ctx, {}
        for call in ctx.tree.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
                caller, callee = ctx.tree.enclosing_function(call), ctx.functions.method(func.attr.value, call)
                if caller is not None and callee is not None:
                    calls.setdefault(id(caller), []).append(callee)
        work = [f for f in ctx.tree.nodes(cst.FunctionDef) if self.module_forward(f.body) is not None
                or not modules_only and f.name.value == "forward" and ctx.tree.enclosing_class(f) is not None
                and ctx.tree.parent(ctx.tree.parent(f)) is ctx.tree.enclosing_class(f)]
        found: set[int] = set()
        while work:
            function = work.pop()
            if id(function) not in found:
                found.add(id(function))
                work.extend(calls.get(id(function), ()))
        return found

    def statement_loop(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The innermost ``for``/``while`` statement whose body holds ``node`` (same scope)."""
        for loop in self.enclosing_loops(node):
            if type(loop) is cst.For or type(loop) is cst.While:
                return loop
        return None

    def branch_key(self, branch: cst.If) -> str:
        """``f#none:max_len``: the branch of ``f`` that runs when ``max_len`` is left out
        (``if max_len is None:``, or the ``else`` of ``if max_len is not None:``)."""
        function = self.ctx.tree.enclosing_function(branch)
        owner = dotted_function_name(self.ctx.tree, function) if function is not None else ""
        return f"{owner}#none:{none_tested(branch.test) or none_tested(branch.test, negated=True)}"

    def loop_key(self, loop: cst.CSTNode) -> str:
        """``Cls.m#loop2``: the third ``for``/``while`` of its function (``#loop0`` at module
        level), the name a loop has in the step summary and in conditional findings."""
        if not hasattr(self, "_loop_ordinals"):
            tree, counts = self.ctx.tree, {}
            self._loop_ordinals: dict[int, int] = {}
            for each in sorted((*tree.nodes(cst.For), *tree.nodes(cst.While)), key=tree.index):
                scope = id(tree.enclosing_function(each))
                self._loop_ordinals[id(each)] = counts.get(scope, 0)
                counts[scope] = counts.get(scope, 0) + 1
        key = self._loop_keys.get(id(loop))
        if key is None:
            function = self.ctx.tree.enclosing_function(loop)
            owner = dotted_function_name(self.ctx.tree, function) if function is not None else ""
            key = self._loop_keys[id(loop)] = f"{owner}#loop{self._loop_ordinals[id(loop)]}"
        return key

    def makes_one_step(self, function: cst.FunctionDef) -> bool:
        """Does ``function`` make one whole training step (a backward and an optimizer step,
        outside any loop of its own, itself or through the functions of this file it calls)?
        A loop of another module that calls it is a step loop."""
        return self._function_parts(function, 0) == _BACKWARD | _OPTIMIZER

    def describe(self, loop: cst.CSTNode) -> str:
        """What a hot loop does, for messages: a training, evaluation or sampling loop."""
        if self.full_batch(loop):
            return FULL_BATCH_WORDS
        return LOOP_WORDS[self.where(loop)]

    def full_batch(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` an epoch loop each of whose iterations makes one training step on the
        whole data (``for epoch in range(n): train(epoch)``, a GNN's full-batch step)?"""
        return _epoch_loop(loop) and self.where(loop) is Where.TRAIN

    def where(self, loop: cst.CSTNode) -> Where:
        """How often a hot loop's body runs, as the impact model counts it (the words for
        it: :meth:`describe`)."""
        key = id(loop)
        if key not in self._described:
            self._described[key] = self._where(loop)
        return self._described[key]

    def _where(self, loop: cst.CSTNode) -> Where:
        if _epoch_loop(loop):
            # `for epoch in range(n): train_epoch(...)`: the code around an inner loop over
            # batches runs once per epoch; but an epoch that is one optimizer step (full-batch
            # training: `for epoch in range(n): train(epoch)`) is the training step itself
            return Where.TRAIN if self._steps_once(loop) else Where.EPOCH
        calls = self.loop_calls(loop) if isinstance(loop, (cst.For, cst.While)) else []
        methods = {self.ctx.method_name(c) for c in calls}
        if "backward" in methods or any(self.ctx.method_name(c) == "step" and self.is_step_call(c) for c in calls):
            return Where.TRAIN
        if any(self._calls_a_trainer(c) for c in calls):
            return Where.TRAIN  # the step is in a function it calls: `self.run_step(batch)`
        if methods & _SAMPLING or self.decodes(loop) or self.ctx.places.repeat_of(loop).kind == "decoded token":
            return Where.INFER  # one token (frame, sample) per iteration: an inference step, with grad or not
        function = self.ctx.tree.enclosing_function(loop)
        name = function.name.value.lower() if function is not None else ""
        # (a loop that puts its model in training mode itself, `trainer.train()`, trains, whatever
        # evaluation it runs every N steps: `trainer.eval()` in a branch)
        evaluates = "eval" in methods and "train" not in methods
        if self.ctx.grad.runs_without_grad(loop) or evaluates or self._after_eval(loop) or any(word in name for word in _EVAL_WORDS):
            return Where.EVAL
        iterated = " ".join(plain_code(self.ctx.module, r) for r in self.iterated_roots(self.iterated_expression(loop))).lower()
        if "train" in name or "train" in iterated:
            return Where.TRAIN  # the backward is in a callable: `loss_scaler(loss, optimizer)`
        return Where.BATCH

    def _steps_once(self, loop: cst.CSTNode) -> bool:
        """Does each iteration of ``loop`` make one training step: a backward or an optimizer
        step in its own body (micro-batch slices included, other nested loops not), or a
        call of a function of this file that makes one?"""
        for node in self.own_calls(loop.body, STEP):
            if self._own_step_parts(node) == _BACKWARD or self._calls_a_trainer(node) \
                    or self.ctx.method_name(node) == "step" and self.is_step_call(node):
                return True
        return False

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

    def _after_eval(self, loop: cst.CSTNode) -> bool:
        """Is the last ``.eval()``/``.train()`` before ``loop`` in its scope an ``.eval()``?"""
        tree = self.ctx.tree
        scope, start = tree.scope_of(loop), tree.index(loop)
        before = [c for c in self.ctx.method_calls(("eval", "train")) if tree.index(c) < start and tree.scope_of(c) is scope]
        return bool(before) and self.ctx.method_name(before[-1]) == "eval" and not before[-1].args

    def is_hot(self, loop: cst.CSTNode) -> bool:
        key = id(loop)
        if key not in self._hot:
            # A loop in a module's forward (over `self.layers`, heads, scales), or in a method
            # the forward calls, is inside the step that calls the model: never a step of its own,
            # unless it decodes (a generator module: fairseq's SequenceGenerator.forward calls
            # `_generate`, whose loop runs the model once per token).
            # Nor is a loop of per-epoch work beside an epoch's batch loop (`per_epoch`).
            self._hot[key] = not self.runs_once(loop) and not self.within_forward(loop) and not self.per_epoch(loop) and (
                self._iterates_loader(loop) or (self._body_steps(loop) and not self._rare_sweep(loop) and not self.builds_its_models(loop)
                                                and not self._within_decode(loop))
                or self.decodes(loop)
                or self._generates(loop))
        return self._hot[key]

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

    def builds_its_models(self, loop: cst.CSTNode) -> bool:
        """Is every model the loop's own body calls built in that body, a new one each
        iteration (vit-pytorch's ``__main__`` demos: ``for num_adv_bins in (0, 2, 10): vat =
        VAT(vit, ...); loss = vat(images, ...); loss.backward()``)? Then the loop goes over
        configurations, each model run once: no step loop."""
        known: dict[int, bool] = self.__dict__.setdefault("_builds", {})
        if id(loop) not in known:
            known[id(loop)] = type(loop) in (cst.For, cst.While) and self._models_built_in(loop)
        return known[id(loop)]

    def _models_built_in(self, loop: cst.For | cst.While) -> bool:
        ctx, called = self.ctx, False
        for node in self.own_calls(loop.body):
            if type(node.func) is not cst.Name:
                if self.ctx.method_name(node) != "backward" and self.is_step_call(node):
                    return False  # `self.model(x)`, `opt.step()`: what the loop steps is made elsewhere
                continue
            binding = ctx.bindings.reaching(node.func.value, node)
            built = binding is not None and binding.kind == "assign" and binding.element is None and _constructs(binding.value)
            if built and ctx.tree.is_inside(binding.node, loop.body):
                called = True  # `vat = VAT(...)` in this iteration, then `vat(images)`
            elif built or ctx.values.kind(node.func, node) is Kind.MODULE:
                return False  # a model made before the loop (or of unknown origin): the loop may train it
        return called

    def decodes(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` a decode loop: one token (frame, sample, denoising step) from a model
        per iteration, the model's type known or not (``analysis/decoding.py``)? Memoised."""
        known: dict[int, bool] = self.__dict__.setdefault("_decodes", {})
        if id(loop) not in known:
            known[id(loop)] = type(loop) in (cst.For, cst.While) and (decodes(self.ctx, loop) or self._samples(loop) or self.denoises(loop))
        return known[id(loop)]

    def reruns_prefix(self, loop: cst.CSTNode) -> PrefixRerun | None:
        """The model call of decode loop ``loop`` given the whole sequence the loop grows, with
        no cache: every token re-runs the prefix (``analysis/prefix.py``)."""
        return reruns_prefix(self.ctx, loop) if type(loop) in (cst.For, cst.While) else None

    def denoises(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` a denoising loop: one diffusion time step per iteration, the model's
        output the next input, no token sampled (``analysis/decoding.py``)? Memoised."""
        known: dict[int, bool] = self.__dict__.setdefault("_denoises", {})
        if id(loop) not in known:  # a loop that samples tokens from logits decodes them: its steps are tokens
            known[id(loop)] = denoises(self.ctx, loop) and not (decodes(self.ctx, loop) or self._samples(loop))
        return known[id(loop)]

    def _samples(self, loop: cst.CSTNode) -> bool:
        """A sampling loop by its calls: it samples (``torch.multinomial``) from a model in it,
        or feeds the model's output back into its input (:meth:`_feeds_back`)."""
        calls = self.loop_calls(loop)
        methods = {self.ctx.method_name(c) for c in calls}
        if methods & _SAMPLING - {"generate"} and any(self.is_step_call(c) for c in calls):
            return True  # (a `torch.multinomial` loop with no model in it, over a mask on the host, samples no tokens)
        return self._feeds_back(loop, calls)

    def _generates(self, loop: cst.CSTNode) -> bool:
        """A loop that calls ``.generate()`` (fairseq's ``for sample in itr: hypos =
        generator.generate(model, sample)``): an inference step per iteration, a whole
        generation (its tokens decoded inside), not one token."""
        return type(loop) in (cst.For, cst.While) and any(
            self.ctx.method_name(n) == "generate" for n in self.loop_calls(loop))

    def _rare_sweep(self, loop: cst.CSTNode) -> bool:
        """``if step % EVAL_EVERY == 0: for n in EVAL_LENGTHS: ...``: a loop over a fixed
        collection (a literal, or an UPPER_CASE constant) in a rare branch of a loop
        runs a few times every N steps, not every step. A loader's loop there (a whole
        evaluation pass) is hot in itself and is not this."""
        iterable = loop.iter if type(loop) is cst.For else None
        fixed = type(iterable) in (cst.List, cst.Tuple, cst.Set) or (
            type(iterable) is cst.Name and iterable.value.isupper())
        if not fixed:
            return False
        outer = next(iter(self.enclosing_loops(loop)), None)
        return outer is not None and type(outer) in (cst.For, cst.While) and self.ctx.guards.rare(loop, stop=outer)

    def around_epochs(self, loop: cst.CSTNode) -> bool:
        """Is there an epoch loop inside ``loop`` (``for split in range(n): ... for epoch in
        range(e):``)? Then each of its iterations is a whole training run."""
        return type(loop) in (cst.For, cst.While) and any(
            type(node) is cst.For and node is not loop and any("epoch" in name.lower() for name in _target_names(node))
            for node in self.ctx.tree.descendants(loop))  # (`for epoch in t:` over `with tqdm(range(n)) as t` too)

    def around_decoding(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` call a function of this file that runs a decode loop of its own, itself
        or through the functions of this file it calls (gpt-fast's ``for i in range(num_samples):
        y = generate(...)``, whose ``decode_n_tokens`` loops over tokens)? Then each of its
        iterations is a whole generation, and the decode loop is the step."""
        if type(loop) is not cst.For or self.decodes(loop):
            return False  # (a `while` loop is the token loop itself: speculative decoding's `while pos < n:` around its draft loop)
        return any(type(node) is cst.Call and self._decodes_within(node, 0) for node in self.ctx.tree.descendants(loop))

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

    @staticmethod
    def runs_once(loop: cst.CSTNode) -> bool:
        """Does the loop's body always end with ``return``/``break``/``raise`` (a benchmark
        that times one batch, a "take the first batch" loop)? It runs at most once."""
        if not isinstance(loop, (cst.For, cst.While)) or not isinstance(loop.body, cst.IndentedBlock):
            return False
        body = loop.body.body
        if not body or not isinstance(body[-1], cst.SimpleStatementLine):
            return False
        return any(isinstance(small, (cst.Return, cst.Break, cst.Raise)) for small in body[-1].body)

    # --- the two ways a loop is hot --------------------------------------------
    def iterated_expression(self, loop: cst.CSTNode) -> cst.BaseExpression | None:
        if isinstance(loop, cst.For):
            return loop.iter
        if isinstance(loop, _COMPREHENSIONS):
            return loop.for_in.iter
        return None

    def loader_of(self, iterable: cst.BaseExpression | None, at: cst.CSTNode) -> cst.BaseExpression | None:
        """The DataLoader expression a loop's iterable walks, through enumerate/zip/tqdm."""
        if iterable is None:
            return None
        if isinstance(iterable, cst.Call):
            name = dotted(iterable.func) or ""
            qualified = self.ctx.qname(iterable.func) or ""
            if name in _ITER_WRAPPERS or qualified.split(".")[0] == "tqdm" or name.rsplit(".", 1)[-1] in _ITER_WRAPPERS:
                for arg in iterable.args:
                    found = self.loader_of(arg.value, at)
                    if found is not None:
                        return found
            return None
        if self.ctx.values.kind(iterable, at) is Kind.LOADER:
            return iterable
        return None

    def _iterates_loader(self, loop: cst.CSTNode) -> bool:
        return self.loader_of(self.iterated_expression(loop), loop) is not None

    def _body_steps(self, loop: cst.CSTNode) -> bool:
        """Does the loop's own body (not a nested loop's) run a training or model step,
        itself or through a function of this file it calls (``while ...: self.run_step(b)``)?"""
        models = _target_names(loop)  # `for net in nets: net(x)` goes over models, not batches
        for part in _body_children(loop) or ((loop.elt,) if hasattr(loop, "elt") else ()):
            for node in self.own_calls(part):
                if self.is_step_call(node) or self._calls_a_trainer(node):
                    if dotted(node.func) in models:
                        continue  # each model called once: the loop's step is no batch's
                    return True
        return False

    def _calls_a_trainer(self, call: cst.Call) -> bool:
        """Does ``call`` run a function of this file that makes one training step: a
        backward and an optimizer step (``opt.step()``, or an optimizer handed to a call:
        ``self.mp_trainer.optimize(self.opt)``), outside any loop of its own, itself or
        through the functions of this file it calls (two levels deep)?"""
        # Asked of each call by every loop around it, the places and the loop's description: answered once.
        # (Not while a function's parts are being found: its answer there is a partial one.)
        known = self._trainer_calls.get(id(call))
        if known is None:
            known = self._step_parts(call, 0) == _BACKWARD | _OPTIMIZER
            if not self._finding_parts:
                self._trainer_calls[id(call)] = known
        return known

    def _step_parts(self, call: cst.Call, depth: int) -> int:
        function = self.ctx.functions.called(call, None if type(call.func) is cst.Attribute else self.ctx.qname(call.func))
        return 0 if function is None else self._function_parts(function, depth)

    def _function_parts(self, function: cst.FunctionDef, depth: int) -> int:
        key = id(function)
        if key not in self._trains:
            self._trains[key] = 0  # recursion ends here
            parts = 0
            self._finding_parts += 1
            try:
                for n in self.own_calls(function.body, STEP):
                    parts |= self._own_step_parts(n) | (self._step_parts(n, depth + 1) if depth < 2 else 0)
            finally:
                self._finding_parts -= 1
            self._trains[key] = parts
        return self._trains[key]

    def _own_step_parts(self, call: cst.Call) -> int:
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "backward":
            return _BACKWARD
        if type(func) is cst.Attribute and func.attr.value == "step" and self.is_step_call(call):
            return _OPTIMIZER
        if any(looks_like_optimizer(dotted(arg.value) or "") for arg in call.args):
            return _OPTIMIZER
        return 0

    def _step_nodes(self, root: cst.CSTNode):  # type: ignore[no-untyped-def]
        """The nodes of one step of a function: its own statements and its microbatch
        loops (``for i in range(0, len(batch), micro):``). Any other loop (over a loader,
        over epochs, ``while``) makes the function a whole epoch or run, so that its
        caller's loop is an epoch loop, not a step loop."""
        return self._own_nodes(root, enter=_slices_a_batch)

    def _own_nodes(self, root: cst.CSTNode, enter=None):  # type: ignore[no-untyped-def]
        """``root`` and its nodes, not descending into nested loops and scopes (except
        the loops ``enter`` accepts). Without ``enter``, a list remembered per root (the
        decode, denoise and top-k questions walk the same loop bodies): do not change it."""
        if enter is not None:
            return self._walk_own(root, enter)
        known: dict[int, list[cst.CSTNode]] = self.__dict__.setdefault("_own", {})
        found = known.get(id(root))
        if found is None:
            found = known[id(root)] = list(self._walk_own(root, lambda node: False))
        return found

    def _walk_own(self, root: cst.CSTNode, enter):  # type: ignore[no-untyped-def]
        stack, children = [root], self.ctx.tree.children
        while stack:
            node = stack.pop()
            yield node
            if type(node) in _NESTED_LOOP_OR_SCOPE and node is not root and not enter(node):
                continue
            stack.extend(children(node))

    def is_step_call(self, call: cst.Call) -> bool:
        """``loss.backward()``, ``optimizer.step()``, or a call of a model."""
        # Asked of each call by every loop and statement around it: answered once.
        known = self._step_calls.get(id(call))
        if known is None:
            known = self._step_calls[id(call)] = self._is_step_call(call)
        return known

    def _is_step_call(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "backward":
                return True
            if method == "step":
                receiver = dotted(func.value) or ""
                if looks_like_optimizer(receiver) or receiver.rsplit(".", 1)[-1] == "scaler":
                    return True
                return self.ctx.values.kind(func.value, call) is Kind.OPTIMIZER
        return self.ctx.values.kind(func, call) is Kind.MODULE

    # --- training loops (TL4xx/TL5xx module-level advice) ----------------------------
    def training_loops(self) -> list[cst.CSTNode]:
        """Innermost ``for``/``while`` loops whose body (nested loops included, nested
        functions not) calls ``.backward()`` and an optimizer (or scaler) ``.step()``."""
        if not hasattr(self, "_training"):
            found: list[cst.CSTNode] = []
            for loop in (*self.ctx.tree.nodes(cst.For), *self.ctx.tree.nodes(cst.While)):
                backward = step = False
                for node in self.loop_calls(loop):
                    if type(node.func) is cst.Attribute:  # type: ignore[attr-defined]
                        method = node.func.attr.value
                        if method == "backward":
                            backward = True
                        elif method == "step" and self.is_step_call(node):
                            step = True
                if backward and step:
                    found.append(loop)
            # keep the innermost: drop a loop that holds another training loop
            self._training = [
                loop for loop in found if not any(other is not loop and self.ctx.tree.is_inside(other, loop) for other in found)
            ]
            self._training.sort(key=self.ctx.tree.index)
        return self._training

    def _loop_nodes(self, loop: cst.CSTNode):  # type: ignore[no-untyped-def]
        stack, children = list(_body_children(loop)), self.ctx.tree.children
        while stack:
            node = stack.pop()
            yield node
            if type(node) in _BARRIER_TYPES:
                continue
            stack.extend(children(node))

    def own_calls(self, root: cst.CSTNode, stops: frozenset[type] | str = OWN) -> list[cst.Call]:
        """The calls of :meth:`_own_nodes` (``STEP``: of :meth:`_step_nodes`), in its order,
        from one index of the file's calls (analysis/subtree_calls.py). Do not change the list."""
        if not hasattr(self, "_subtree_calls"):
            self._subtree_calls = SubtreeCalls(self.ctx.tree, _slices_a_batch)
        return self._subtree_calls.calls(root, stops)

    def loop_calls(self, loop: cst.CSTNode) -> list[cst.Call]:
        """The calls of :meth:`_loop_nodes`, in its order: a loop's body's (a ``while``'s test first)."""
        return [call for part in reversed(_body_children(loop)) if type(part) not in _BARRIER_TYPES for call in self.own_calls(part, IN_SCOPE)]

    # --- where a value is iterated (TL201/TL202 point the profiler at these loops) --------
    def iterated_roots(self, iterable: cst.BaseExpression | None) -> list[cst.BaseExpression]:
        """The expressions a loop's iterable walks, through enumerate/zip/tqdm/iter wrappers:
        ``enumerate(tqdm(train_loader))`` → ``[train_loader]``."""
        if iterable is None:
            return []
        if isinstance(iterable, cst.IfExp):  # `for x in (dl if webdataset else distr_dl)`: either
            return [*self.iterated_roots(iterable.body), *self.iterated_roots(iterable.orelse)]
        if isinstance(iterable, cst.Call):
            name = dotted(iterable.func) or ""
            qualified = self.ctx.qname(iterable.func) or ""
            if name in _ITER_WRAPPERS or qualified.split(".")[0] == "tqdm" or name.rsplit(".", 1)[-1] in _ITER_WRAPPERS:
                roots: list[cst.BaseExpression] = []
                for arg in iterable.args:
                    if arg.keyword is None and not arg.star:
                        roots.extend(self.iterated_roots(arg.value))
                return roots
        return [iterable]

    def iterations_of(self, value: cst.BaseExpression) -> list[cst.CSTNode]:
        """The loops that iterate the value of the expression ``value``, in source order:
        ``for`` statements (also ``async for``) and comprehension ``CompFor`` clauses.

        The value is followed through the names and ``self.`` attributes it is assigned to
        (``train_loader = DataLoader(...)`` then ``for x, y in tqdm(train_loader)``), tuple
        assignments, arguments of calls of functions defined in this file (``train(loader)``
        then ``for x in loader`` in ``def train(loader)``), and ``return`` values back to the
        call sites of the function (``loader = make_loader()``).
        """
        ctx, tree = self.ctx, self.ctx.tree
        if not hasattr(self, "_loop_roots"):
            self._loop_roots: dict[int, list[cst.CSTNode]] = {}
            for loop in (*tree.nodes(cst.For), *tree.nodes(cst.CompFor)):
                for root in self.iterated_roots(loop.iter):
                    self._loop_roots.setdefault(id(root), []).append(loop)
        found: dict[int, cst.CSTNode] = {}
        seen: set[tuple[int, int | None]] = set()
        work: list[tuple[cst.CSTNode, int | None]] = [(value, None)]
        while work and len(seen) < 200:
            node, element = work.pop()
            if (id(node), element) in seen:
                continue
            seen.add((id(node), element))
            if element is None:
                for loop in self._loop_roots.get(id(node), ()):
                    found[id(loop)] = loop
            parent = tree.parent(node)
            if element is None and isinstance(parent, cst.Element):
                container = tree.parent(parent)
                if isinstance(container, (cst.Tuple, cst.List)):
                    work.append((container, [e is parent for e in container.elements].index(True)))
            for binding in ctx.bindings.bound_to(node, element):
                work.extend((use, None) for use in ctx.bindings.uses(binding, ordered=True))
            if isinstance(parent, cst.Return) and parent.value is node:
                function = tree.enclosing_function(parent)
                if function is not None:
                    work.extend((call, element) for call in self._local_calls(function))
            if element is None and isinstance(parent, cst.Arg) and parent.value is node:
                call = tree.parent(parent)
                if isinstance(call, cst.Call):
                    param = self._parameter_for(call, parent)
                    if param is not None:
                        for binding in ctx.bindings.lookup(param.name.value, param):
                            if binding.node is param:
                                work.extend((use, None) for use in ctx.bindings.uses(binding))
        return sorted(found.values(), key=tree.index)

    def only_first_batch(self, value: cst.BaseExpression) -> bool:
        """Is ``value`` assigned to a name that is only ever read as ``next(iter(name))``
        or ``len(name)`` (a loader built to peek at one batch, never iterated), and at
        least once as the first?"""
        ctx = self.ctx
        bindings = ctx.bindings.bound_to(value)
        if not bindings:
            return False
        uses = [use for binding in bindings for use in ctx.bindings.uses(binding, ordered=True)]
        if not uses:
            return False
        peeked = False
        for use in uses:
            arg = ctx.tree.parent(use)
            inner = ctx.tree.parent(arg) if isinstance(arg, cst.Arg) else None
            if isinstance(inner, cst.Call) and dotted(inner.func) == "len":
                continue  # its size, e.g. for a progress bar: no batch is loaded
            outer_arg = ctx.tree.parent(inner) if isinstance(inner, cst.Call) else None
            outer = ctx.tree.parent(outer_arg) if isinstance(outer_arg, cst.Arg) else None
            if not (isinstance(inner, cst.Call) and dotted(inner.func) == "iter" and isinstance(outer, cst.Call) and dotted(outer.func) == "next"):
                return False
            peeked = True
        return peeked

    def never_read(self, value: cst.BaseExpression) -> bool:
        """Is ``value`` assigned only to plain names that nothing reads (``train_loader =
        DataLoader(stub)`` after the loop that read the first ``train_loader``, or a local
        never used)? ``self.x`` attributes are read by other methods."""
        ctx = self.ctx
        bindings = ctx.bindings.bound_to(value)
        if not bindings or any(b.name.startswith("self.") or b.kind != "assign" for b in bindings):
            return False
        if any(ctx.tree.enclosing_function(b.node) is None and len(ctx.bindings.lookup(b.name, b.node)) < 2 for b in bindings):
            return False  # a module's only binding of the name: another module may import it
        return all(self._unread(binding) for binding in bindings)

    def _unread(self, binding: Binding) -> bool:
        """No read follows ``binding``, or the name is bound again in the same block before the
        first read after it. A rebinding in another branch (``if a: x = A() else: x = B()``)
        leaves both read."""
        tree = self.ctx.tree
        here = tree.statement_of(binding.node)
        start = tree.index(binding.node)
        reads = [tree.index(use) for use in self.ctx.bindings.uses(binding) if tree.index(use) > start]
        if not reads:
            return True
        block = tree.parent(here) if here is not None else None
        rebound = [tree.index(b.node) for b in self.ctx.bindings.lookup(binding.name, binding.node)
                   if b is not binding and b.kind == "assign" and tree.index(b.node) > start
                   and tree.parent(tree.statement_of(b.node)) is block]
        return bool(rebound) and min(rebound) < min(reads)

    def _local_function(self, call: cst.Call) -> cst.FunctionDef | None:
        """The function of this file that ``call`` runs (``f(...)``, ``self.m(...)``)."""
        return self.ctx.functions.called(call, self.ctx.qname(call.func))

    def _local_calls(self, function: cst.FunctionDef) -> list[cst.Call]:
        """Calls of ``function`` in this file (as resolved by :meth:`_local_function`)."""
        name = function.name.value
        return [
            call for call in self.ctx.tree.nodes(cst.Call)
            if (dotted(call.func) or "").rsplit(".", 1)[-1] == name and self._local_function(call) is function
        ]

    def _parameter_for(self, call: cst.Call, arg: cst.Arg) -> cst.Param | None:
        """The parameter of a local function that ``arg`` of ``call`` is passed to."""
        function = self._local_function(call)
        if function is None or arg.star or any(a.star == "*" for a in call.args):
            return None
        params = function.params
        if arg.keyword is not None:
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                if param.name.value == arg.keyword.value:
                    return param
            return None
        positional = [*params.posonly_params, *params.params]
        if isinstance(call.func, cst.Attribute):
            positional = positional[1:]  # self.m(x): x is the parameter after `self`
        index = [a for a in call.args if a.keyword is None].index(arg)
        return positional[index] if index < len(positional) else None


def _target_names(loop: cst.CSTNode) -> set[str]:
    """The names a loop binds each iteration (``net`` in ``for net in nets``,
    ``net, opt`` in ``for net, opt in zip(nets, opts)``, ``attn, ff`` in
    ``for i, (attn, ff) in enumerate(self.layers)``)."""
    target = loop.target if isinstance(loop, cst.For) else getattr(getattr(loop, "for_in", None), "target", None)
    parts, names = [target] if target is not None else [], set()
    while parts:
        part = parts.pop()
        if isinstance(part, (cst.Tuple, cst.List)):
            parts.extend(e.value for e in part.elements)  # nested unpacking binds each name inside
        elif dotted(part) is not None:
            names.add(dotted(part))
    return names


def _constructs(value: cst.BaseExpression | None) -> bool:
    """``VAT(vit, dim=512)``, ``Net().cuda()``: a call of a class (a name written as one)."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MODULE_CHAIN:
        value = value.func.value
    if type(value) is not cst.Call:
        return False
    name = dotted(value.func) or ""
    return name.rsplit(".", 1)[-1].lstrip("_")[:1].isupper()


def _epoch_loop(loop: cst.CSTNode) -> bool:
    """``for epoch in range(...)`` (or ``tqdm(range(...))``), ``for i in range(epochs)``: a
    loop over epochs, not batches."""
    if type(loop) is not cst.For:
        return False
    named = any("epoch" in name.lower() for name in _target_names(loop))
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and dotted(iterable.func) in ("tqdm", "tqdm.tqdm", "trange", "enumerate") and iterable.args:
        if dotted(iterable.func) == "trange":
            return named or _counts_epochs(iterable)
        iterable = iterable.args[0].value
    return isinstance(iterable, cst.Call) and dotted(iterable.func) == "range" and (named or _counts_epochs(iterable))


def _counts_epochs(call: cst.Call) -> bool:
    """``range(epochs)``, ``range(start, args.num_epochs)``: its bounds count epochs."""
    return any("epoch" in (dotted(arg.value) or "").lower() for arg in call.args)


def _counts(loop: cst.CSTNode) -> bool:
    """``for i in range(...)`` (also ``enumerate(range(...))``): a loop over a count, not over
    batches or samples of some iterable."""
    if type(loop) is not cst.For:
        return False
    iterable = loop.iter
    if type(iterable) is cst.Call and dotted(iterable.func) == "enumerate" and iterable.args:
        iterable = iterable.args[0].value
    return is_range(iterable)
