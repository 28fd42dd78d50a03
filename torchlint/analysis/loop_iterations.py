"""Where a value is iterated: the loops that walk an expression's value through names, tuples,
calls of this file's functions and their returns (TL201/TL202 point the profiler at these loops),
and loaders built to peek at one batch or never read (a part of ``Loops``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.loop_shapes import ITER_WRAPPERS
from torchlint.analysis.names import dotted

# Wrappers a loader is drawn from batch by batch (`tmp = cycle(DataLoader(...))`, `iter(...)`).
_ONE_BATCH_WRAPPERS = frozenset({"cycle", "itertools.cycle", "iter"})

if TYPE_CHECKING:
    from torchlint.analysis.bindings import Binding
    from torchlint.analysis.context import FileContext


class ValueIterations:
    """The loops that iterate a value of one file, and values nothing iterates."""

    ctx: FileContext

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
            if name in ITER_WRAPPERS or qualified.split(".")[0] == "tqdm" or name.rsplit(".", 1)[-1] in ITER_WRAPPERS:
                roots: list[cst.BaseExpression] = []
                for arg in iterable.args:
                    if arg.keyword is None and not arg.star:
                        roots.extend(self.iterated_roots(arg.value))
                return roots
        return [iterable]

    def iterations_of(self, value: cst.BaseExpression, reached: set[int] | None = None) -> list[cst.CSTNode]:
        """The loops that iterate the value of the expression ``value``, in source order:
        ``for`` statements (also ``async for``) and comprehension ``CompFor`` clauses.

        The value is followed through the names and ``self.`` attributes it is assigned to
        (``train_loader = DataLoader(...)`` then ``for x, y in tqdm(train_loader)``), tuple
        assignments, arguments of calls of functions defined in this file (``train(loader)``
        then ``for x in loader`` in ``def train(loader)``), and ``return`` values back to the
        call sites of the function (``loader = make_loader()``). ``reached``, when given, collects
        the ids of the expressions the value was followed to.
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
            if reached is not None:
                reached.add(id(node))
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

    def generator_draws(self, loop: cst.CSTNode, reached: set[int]) -> list[cst.CSTNode]:
        """Where ``loop`` is the loop of a generator of this file that yields what it iterates
        (stylegan2's ``def sample_data(loader): while True: for batch in loader: yield batch``), the
        loops that draw from that generator: over a call of it, or around ``next(gen)`` of a name
        bound to one (``loader = sample_data(loader)``, then ``real_img = next(loader)`` in the
        training loop), of the calls given one of the ``reached`` values (``iterations_of``'s): the
        same generator may feed an evaluation elsewhere. Empty for any other loop."""
        ctx, tree = self.ctx, self.ctx.tree
        function = tree.enclosing_function(loop)
        if type(loop) is not cst.For or function is None or not any(
                tree.is_inside(y, loop.body) and tree.enclosing_function(y) is function for y in tree.nodes(cst.Yield)):
            return []  # (a plain function's loop: its own iterations are where the items go)
        drawing: dict[int, cst.CSTNode] = {}
        for call in self._local_calls(function):
            if not any(id(arg.value) in reached for arg in call.args):
                continue  # (a call given another loader)
            for each in self.iterations_of(call):
                drawing[id(each)] = each
            for binding in ctx.bindings.bound_to(call):
                for use in ctx.bindings.uses(binding):
                    arg = tree.parent(use)
                    drawn = tree.parent(arg) if type(arg) is cst.Arg else None
                    if type(drawn) is cst.Call and dotted(drawn.func) == "next" and ctx.qname(drawn.func) is None:
                        for each in self.enclosing_loops(drawn)[:1]:  # a batch per iteration of the loop around the draw
                            drawing[id(each)] = each
        return sorted(drawing.values(), key=tree.index)

    def only_first_batch(self, value: cst.BaseExpression) -> bool:
        """Is ``value`` assigned to a name that is only ever read as ``next(iter(name))``
        or ``len(name)`` (a loader built to peek at one batch, never iterated), and at
        least once as the first? Or, wrapped (``tmp = cycle(DataLoader(...))``), to a local
        name read once, outside any loop, as ``next(tmp)`` or ``tmp.__next__()`` (then maybe
        ``tmp.close()``): decision-diffuser's temporary loader for one batch to render."""
        ctx = self.ctx
        bindings = ctx.bindings.bound_to(value)
        wrapper = ctx.tree.parent(ctx.tree.parent(value))
        if not bindings and type(wrapper) is cst.Call and dotted(wrapper.func) in _ONE_BATCH_WRAPPERS:
            return self._one_draw(ctx.bindings.bound_to(wrapper))
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

    def _one_draw(self, bindings: list) -> bool:  # type: ignore[type-arg]
        """A plain local name (a fresh iterator per call of its function, not a ``self.`` attribute
        a step draws from again) whose reads are one draw outside any loop, and its closing."""
        ctx = self.ctx
        if len(bindings) != 1 or "." in bindings[0].name or ctx.tree.enclosing_function(bindings[0].node) is None:
            return False
        draws = 0
        for use in ctx.bindings.uses(bindings[0]):
            parent = ctx.tree.parent(use)
            if type(parent) is cst.Arg and type(call := ctx.tree.parent(parent)) is cst.Call and dotted(call.func) == "next":
                draws += 1
            elif type(parent) is cst.Attribute and parent.attr.value in ("__next__", "close") and type(ctx.tree.parent(parent)) is cst.Call:
                draws += parent.attr.value == "__next__"
            else:
                return False  # iterated, handed on, kept: more batches may be drawn
            if self.enclosing_loops(use):
                return False  # (drawn in a loop: a batch per iteration)
        return draws == 1

    def iterations_through_wrappers(self, value: cst.Call) -> list[cst.CSTNode]:
        """The loops over what a call that is given ``value``'s name returns, or over a name a tuple
        target takes from it (also given as one branch of a conditional expression): a wrapper such
        as ``accelerator.prepare`` or a backend's ``distribute``, ``(model, opt, dl, sched) =
        distr_backend.distribute(..., training_data=ds if deepspeed else dl)``, then ``for x in dl:``."""
        ctx, loops = self.ctx, []
        for binding in ctx.bindings.bound_to(value):
            for use in ctx.bindings.uses(binding):
                node = ctx.tree.parent(use)
                while isinstance(node, cst.IfExp):
                    node = ctx.tree.parent(node)
                wrapper = ctx.tree.parent(node) if isinstance(node, cst.Arg) else None
                if not isinstance(wrapper, cst.Call):
                    continue
                loops.extend(self.iterations_of(wrapper))
                for element in range(8):  # (a tuple target's names, a wrapper returning a few objects)
                    for bound in ctx.bindings.bound_to(wrapper, element):
                        loops.extend(loop for read in ctx.bindings.uses(bound) for loop in self.iterations_of(read))
        return loops

    def over_one_batch(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` go over the items of one batch taken from a loader (``imgs = next(iter(val_dl))``
        then ``for a, b in zip(imgs["A"], imgs["B"]):``)? Its iterations are rows of whatever runs the
        function (PyTorch-GAN's ``sample_images``, every N steps), not steps of their own."""
        ctx = self.ctx
        roots = self.iterated_roots(loop.iter) if isinstance(loop, cst.For) else []
        for root in roots:
            while isinstance(root, (cst.Subscript, cst.Attribute)):
                root = root.value
            binding = ctx.bindings.reaching(root.value, loop) if isinstance(root, cst.Name) else None
            value = binding.value if binding is not None and binding.kind == "assign" and binding.element is None else None
            if not (isinstance(value, cst.Call) and dotted(value.func) == "next" and value.args
                    and isinstance(value.args[0].value, cst.Call) and dotted(value.args[0].value.func) == "iter"):
                return False
        return bool(roots)

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
