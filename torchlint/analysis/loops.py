"""Loop context: which loop a node runs in, and whether that loop is a hot (per-step) loop.

``Loops`` is one object per file, made of parts: ``loop_steps`` (step calls, training loops),
``loop_decoding`` (decode and denoising loops), ``loop_forward`` (loops within a model's forward)
and ``loop_iterations`` (where a value is iterated); ``loop_shapes`` holds what a loop looks like
on its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.functions import dotted_function_name
from torchlint.analysis.host_consumers import names_an_environment
from torchlint.analysis.inline_lambdas import runs_in_place
from torchlint.analysis.loop_decoding import DecodeLoops
from torchlint.analysis.loop_forward import ForwardLoops
from torchlint.analysis.loop_iterations import ValueIterations
from torchlint.analysis.multiplicity import ENV_STEP, FULL_BATCH_WORDS, LOOP_WORDS, ROLLOUT_WORDS, Where
from torchlint.analysis.loop_shapes import (
    BACKWARD, BARRIER_TYPES, COMPREHENSION_TYPES, COMPREHENSIONS, ITER_WRAPPERS, body_children, constructs, model_sampling,
    epoch_loop, over_a_count, target_names,
)
from torchlint.analysis.loop_steps import StepCalls
from torchlint.analysis.names import dotted
from torchlint.analysis.positions import plain_code
from torchlint.analysis.subtree_calls import STEP
from torchlint.analysis.values import Kind

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

Loop = cst.For | cst.While | cst.CompFor
_EVAL_WORDS = ("eval", "valid", "test", "infer", "predict")


# A tensor's fields: a value of the item read for them is a tensor, not an object of members.
_TENSOR_FIELDS = frozenset({"shape", "data", "T", "mT", "grad", "device", "dtype", "real", "imag"})

class Loops(ForwardLoops, DecodeLoops, StepCalls, ValueIterations):
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
            if ancestor_type in BARRIER_TYPES:
                if ancestor_type is cst.Lambda and runs_in_place(self.ctx, ancestor):
                    child = ancestor  # `map(lambda t: t.item(), ts)`: run right here, once per item
                    continue
                break
            if ancestor_type is cst.For or ancestor_type is cst.While:
                if any(child is part for part in body_children(ancestor)):
                    loops.append(ancestor)
            elif ancestor_type in COMPREHENSION_TYPES:
                first = ancestor.for_in
                if child is not first or self._inside_comp_body(node, first):
                    loops.append(ancestor)
            child = ancestor
        return loops

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
        if found is not None:
            # `for epoch in range(update_epochs): for mb in ...: <step>` inside a hot loop (PPO's
            # iteration: a rollout, then its epochs): the epoch loop's own statements, beside
            # its batches, run once per epoch, not within a step of the loop around it
            inner = [loop for loop in enclosing[:next(i for i, loop in enumerate(enclosing) if loop is found)]]
            found = next((loop for loop in inner if type(loop) in (cst.For, cst.While) and self.around_batches(loop)), found)
            if enclosing[0] is found:
                # (PPO's `for iteration in range(n):` around a rollout and `for epoch in range(update_epochs):`: its own
                # statements, the explained variance after the epochs, run once per iteration of many steps, as an epoch's)
                found = self._epochs_inside(found) or found
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
            known[id(loop)] = epoch_loop(loop) and not self._steps_once(loop) and any(
                type(inner) in (cst.For, cst.While) and (self._iterates_loader(inner) or id(inner) in training)
                for inner in self._loop_nodes(loop))
        return known[id(loop)]

    def _epochs_inside(self, loop: cst.CSTNode) -> cst.CSTNode | None:
        """The epoch loop over batches (:meth:`around_batches`) in the body of ``loop``, a loop that makes no training
        step of its own (PPO's iteration: a rollout, then ``for epoch in range(update_epochs):``), or None."""
        known: dict[int, cst.CSTNode | None] = self.__dict__.setdefault("_epochs_inside_memo", {})  # (asked per statement of the loop)
        if id(loop) not in known:
            known[id(loop)] = None if type(loop) not in (cst.For, cst.While) or epoch_loop(loop) or self._trains_itself(loop) else next(
                (inner for inner in self._loop_nodes(loop) if inner is not loop and type(inner) in (cst.For, cst.While) and self.around_batches(inner)), None)
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
            if self._iterates_loader(outer) or not over_a_count(outer):
                # inside an evaluation pass over a loader, or over what may be one (`for batch in
                # val_pbar:` with `val_pbar = tqdm(val_loader)`): within its steps. Only a count
                # (`for bib in range(len(d_en)):`) repeats once per epoch around it
                return None
        if epoch is None or self._iterates_loader(loop) or not over_a_count(loop):
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
        guards = self.ctx.guards
        return f"{owner}#none:{guards.none_name(branch.test) or guards.none_name(branch.test, negated=True)}"

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

    def describe(self, loop: cst.CSTNode) -> str:
        """What a hot loop does, for messages: a training, evaluation or sampling loop."""
        if self.full_batch(loop):
            return FULL_BATCH_WORDS
        where = self.where(loop)
        if where is Where.INFER and self.ctx.places.repeat_of(loop).kind == ENV_STEP:
            return ROLLOUT_WORDS  # it samples actions, one environment step per iteration: no token decoded
        return LOOP_WORDS[where]

    def full_batch(self, loop: cst.CSTNode) -> bool:
        """Is ``loop`` an epoch loop each of whose iterations makes one training step on the
        whole data (``for epoch in range(n): train(epoch)``, a GNN's full-batch step)?"""
        return epoch_loop(loop) and self.where(loop) is Where.TRAIN

    def where(self, loop: cst.CSTNode) -> Where:
        """How often a hot loop's body runs, as the impact model counts it (the words for
        it: :meth:`describe`)."""
        key = id(loop)
        if key not in self._described:
            self._described[key] = self._where(loop)
        return self._described[key]

    def _where(self, loop: cst.CSTNode) -> Where:
        if epoch_loop(loop):
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
        sampling = model_sampling([(dotted(c.func.value) if type(c.func) is cst.Attribute else None, self.ctx.method_name(c)) for c in calls])
        if sampling or self.decodes(loop) or self.ctx.places.repeat_of(loop).kind in ("decoded token", ENV_STEP):
            return Where.INFER  # one token (frame, sample) per iteration: an inference step, with grad or not
        function = self.ctx.tree.enclosing_function(loop)
        name = function.name.value.lower() if function is not None else ""
        # (a loop that puts its model in training mode itself, `trainer.train()`, trains, whatever
        # evaluation it runs every N steps: `trainer.eval()` in a branch)
        # (not an environment's `envs.venv.eval()`: a normalising wrapper's statistics frozen, no model's mode)
        modes = {self.ctx.method_name(c) for c in calls if not _an_environment_mode(c)}
        evaluates = "eval" in modes and "train" not in modes
        # (the outermost loop of a function named for both, audiocraft's `common_train_valid`, trains too:
        # training first; a loop inside another there, `train_with_evaluation_pass`'s, evaluates)
        both = "train" in name and not any(type(a) in (cst.For, cst.While) for a in self.ctx.tree.ancestors(loop) if self.ctx.tree.is_inside(a, function))
        named_eval = any(word in name for word in _EVAL_WORDS) and not both
        if self.ctx.grad.runs_without_grad(loop) or evaluates or self._after_eval(loop) or named_eval:
            return Where.EVAL
        iterated = " ".join(plain_code(self.ctx.module, r) for r in self.iterated_roots(self.iterated_expression(loop))).lower()
        if "train" in name or "train" in iterated:
            return Where.TRAIN  # the backward is in a callable: `loss_scaler(loss, optimizer)`
        return Where.BATCH

    def _steps_once(self, loop: cst.CSTNode) -> bool:
        """Does each iteration of ``loop`` make one training step: a backward or an optimizer
        step in its own body (micro-batch slices included, other nested loops not), or a
        call of a function of this file that makes one?"""
        tree = self.ctx.tree
        if any(inner is not loop and tree.is_inside(inner, loop) for inner in self.training_loops()):
            return False  # PPO's `for start in range(0, n, mb):` steps the optimizer itself: minibatch steps, not micro-batches of one
        return self._trains_itself(loop)

    def _trains_itself(self, loop: cst.CSTNode) -> bool:
        """Does ``loop``'s own body (its nested loops aside) make a training step: a backward, an optimizer step,
        a call of a function of this file that makes one (a GAN's generator step around its critic's loop)?"""
        return any(self._own_step_parts(node) == BACKWARD or self._calls_a_trainer(node)
                   or self.ctx.method_name(node) == "step" and self.is_step_call(node) for node in self.own_calls(loop.body, STEP))

    def _after_eval(self, loop: cst.CSTNode) -> bool:
        """Is the last ``.eval()``/``.train()`` before ``loop`` in its scope an ``.eval()``?"""
        tree = self.ctx.tree
        scope, start = tree.scope_of(loop), tree.index(loop)
        before = [c for c in self.ctx.method_calls(("eval", "train"))
                  if tree.index(c) < start and tree.scope_of(c) is scope and not _an_environment_mode(c)]
        return bool(before) and self.ctx.method_name(before[-1]) == "eval" and not before[-1].args

    def is_hot(self, loop: cst.CSTNode) -> bool:
        key = id(loop)
        if key not in self._hot:
            # A loop in a module's forward (over `self.layers`, heads, scales), or in a method
            # the forward calls, is inside the step that calls the model: never a step of its own,
            # unless it decodes (a generator module: fairseq's SequenceGenerator.forward calls
            # `_generate`, whose loop runs the model once per token).
            # Nor is a loop of per-epoch work beside an epoch's batch loop (`per_epoch`).
            # Nor a loop over the items of one batch taken with `next(iter(loader))` (`over_one_batch`).
            self._hot[key] = not self.runs_once(loop) and not self.within_forward(loop) and not self.per_epoch(loop) \
                and not self.over_one_batch(loop) and (
                self._iterates_loader(loop) or (self._body_steps(loop) and not self._rare_sweep(loop) and not self.builds_its_models(loop)
                                                and not self._within_decode(loop))
                or self.decodes(loop)
                or self.runs_generations(loop))
        return self._hot[key]

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
                if self._made_from_the_item(node.func, loop):
                    called = True  # `solver = get_solver_from_sig(sig)`, then `solver.augment(batch)`: one experiment per item
                continue
            binding = ctx.bindings.reaching(node.func.value, node)
            built = binding is not None and binding.kind == "assign" and binding.element is None and constructs(binding.value)
            if built and ctx.tree.is_inside(binding.node, loop.body):
                called = True  # `vat = VAT(...)` in this iteration, then `vat(images)`
            elif built or ctx.values.kind(node.func, node) is Kind.MODULE:
                return False  # a model made before the loop (or of unknown origin): the loop may train it
        return called

    def _made_from_the_item(self, func: cst.BaseExpression, loop: cst.For | cst.While) -> bool:
        """Is the object a method is called on made in this iteration by a call given the loop's item
        (``solver = train.get_solver_from_sig(sig)`` for each ``sig``, ``model = load_model(path)`` for each
        checkpoint)? Each item is then another model, run, or checkpoint, not another batch."""
        root = func
        while type(root) is cst.Attribute:
            root = root.value
        if type(root) is not cst.Name or type(loop) is not cst.For:
            return False
        binding = self.ctx.bindings.reaching(root.value, func)
        if binding is None or binding.kind != "assign" or binding.element is not None or type(binding.value) is not cst.Call \
                or not self.ctx.tree.is_inside(binding.node, loop.body):
            return False
        items = target_names(loop)
        if not any(type(arg.value) is cst.Name and arg.value.value in items for arg in binding.value.args):
            return False
        # (an object of members, `solver.model.load_state_dict(...)`, `solver.loaders['train']`: a run, not a value
        # computed from the item, `gen = tts.tts(text)` then `gen.squeeze(0)`, which a loop over texts may run its model for)
        return any(type(node.value) is cst.Attribute and dotted(node.value.value) == root.value and node.value.attr.value not in _TENSOR_FIELDS
                   for node in self.ctx.tree.descendants(loop.body) if type(node) in (cst.Attribute, cst.Subscript))

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
            type(node) is cst.For and node is not loop and any("epoch" in name.lower() for name in target_names(node))
            for node in self.ctx.tree.descendants(loop))  # (`for epoch in t:` over `with tqdm(range(n)) as t` too)

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
        if isinstance(loop, COMPREHENSIONS):
            return loop.for_in.iter
        return None

    def loader_of(self, iterable: cst.BaseExpression | None, at: cst.CSTNode) -> cst.BaseExpression | None:
        """The DataLoader expression a loop's iterable walks, through enumerate/zip/tqdm."""
        if iterable is None:
            return None
        if isinstance(iterable, cst.Call):
            name = dotted(iterable.func) or ""
            qualified = self.ctx.qname(iterable.func) or ""
            if name in ITER_WRAPPERS or qualified.split(".")[0] == "tqdm" or name.rsplit(".", 1)[-1] in ITER_WRAPPERS:
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


def _an_environment_mode(call: cst.Call) -> bool:
    """``envs.venv.eval()``: an environment's mode (a normalising wrapper's statistics frozen), not a model's."""
    return type(call.func) is cst.Attribute and names_an_environment(call.func.value)
