"""What each call site of the step summary passes its callee (the argument fields of
``CallSite``): constants, arguments just uploaded, host values given to a constructor, device
tensors (or tensors where the caller's parameters are), the caller's own parameters and the keys
of its ``**kwargs`` handed on, flags left off, and whether it may pass a tensor at all. A mixin
of StepSummarizer, which supplies ``ctx``."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Callable

import libcst as cst

from torchlint.analysis.literal_tests import literal
from torchlint.analysis.host_arguments import may_be_tensor, python_values
from torchlint.analysis.host_consumers import steps_an_environment
from torchlint.analysis.names import dotted
from torchlint.analysis.summary import CONFIG_NAMES, Ref

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class CallArguments:
    """What a call hands its callee (see the module docstring)."""

    ctx: FileContext
    target: Callable[[cst.BaseExpression, cst.CSTNode], Ref | None]  # StepSummarizer's (summary_targets.py)

    def _none_settings(self, call: cst.Call) -> tuple[int | str, ...]:
        """Arguments (position or keyword) that are a run setting whose argparse default is None
        (``args.clip_grad`` for ``--clip_grad`` with ``default=None``): they may hold None, a value
        left out would (``CallSite.maybe_none``)."""
        defaults = self.ctx.constants.argparse_defaults()
        if not defaults:
            return ()
        return _arguments_where(call, lambda value: type(value) is cst.Attribute and type(value.value) is cst.Name
                                and value.value.value in CONFIG_NAMES and _is_none(defaults.get(value.attr.value)))

    def _constant_args(self, call: cst.Call) -> tuple[int | str, ...]:
        """Arguments that hold the same value on every step (``self.alphas`` set in
        ``__init__``, a module constant): a callee that uploads them uploads a constant."""
        found: list[int | str] = []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            if _may_be_constant(arg.value) and self.ctx.uploads.same_every_step(arg.value, call, None):
                found.append(arg.keyword.value if arg.keyword is not None else position)
        return tuple(found)

    def _uploaded_args(self, call: cst.Call) -> tuple[int | str, ...]:
        """Arguments the caller copied from the host just before (``caplens = caplens.to(device)``
        of a loader batch): a callee that reads them back to the host makes a round trip."""
        return _arguments_where(call, lambda value: self.ctx.uploads.uploaded_batch(value, call))

    @cached_property
    def _steps_env(self) -> bool:
        return steps_an_environment(self.ctx)  # a file that steps no environment: no call's result feeds one (asked once)

    def _host_args(self, call: cst.Call) -> tuple[tuple[int | str, ...], tuple[tuple[int | str, tuple[str, ...]], ...]]:
        """The arguments that are host values (``Layer(dev, m, n)`` with ``n`` from ``zip(dims[:-1],
        dims[1:])`` over ``torch.LongTensor`` lists; ``audio_write(path, wav.cpu())``), then those on the
        host where the caller's parameters named are (all of them): ``wav`` of ``for wav in wavs`` in
        ``add_samples(self, wavs)``, the join follows them to the callers (``join_params.host_call_params``)."""
        devices, found, conditional = self.ctx.devices, [], []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            value, where = arg.value, arg.keyword.value if arg.keyword is not None else position
            if type(value) in (cst.Integer, cst.Float, cst.SimpleString):
                found.append(where)
                continue
            if _is_none(value):
                continue  # (nothing to read: the callee's `if wav is None:` branch, which the others decide)
            own = self._own_parameter(value, call)
            params = (own,) if own else devices.host_if(value, call)
            if params == ():
                found.append(where)
            elif params:
                conditional.append((where, params))
        return tuple(found), tuple(conditional)

    def _own_parameter(self, value: cst.BaseExpression, call: cst.Call) -> str:
        """The name of the calling function's own parameter ``value`` is, bound nowhere else and with no
        default (what ``host_if`` would find after following its bindings, found at once: most
        arguments handed on are such names); "" for anything else."""
        if type(value) is not cst.Name or value.value in ("self", "cls"):
            return ""
        bound = self.ctx.bindings.lookup(value.value, call)
        if len(bound) != 1 or bound[0].kind != "param" or type(bound[0].node) is not cst.Param or bound[0].node.default is not None:
            return ""
        tree = self.ctx.tree
        return value.value if tree.enclosing_function(bound[0].node) is tree.enclosing_function(call) else ""

    def _listed_args(self, call: cst.Call) -> tuple[int | str, ...]:
        """Arguments that are Python lists (whisper's ``rearrange_kv_cache(source_indices)`` with
        ``source_indices`` appended to from ``[]``): a callee indexing a device tensor with one
        copies it over (``Steps.device_params``' ``listed:`` keys)."""
        return _arguments_where(call, lambda value: self.ctx.uploads.python_list(value, call))

    def _element_args(self, call: cst.Call) -> tuple[int | str, ...]:
        """Arguments that are a dict or a list whose values are device tensors (demucs' ``losses =
        {}`` then ``losses["reco"] = reco.mean()``, handed to ``averager(losses)``): a callee
        reading each value into Python waits once per value (``Steps.device_params``' ``elements:`` keys)."""
        return _arguments_where(call, lambda value: self.ctx.syncs.holds_device_values(value, call))

    def _forwards(self, call: cst.Call) -> tuple[int | str, ...] | None:
        """For ``self.net(x, flag=True, **kwargs)`` where ``kwargs`` is the caller's own ``**``
        parameter: the arguments passed here and the keys the caller sets in ``kwargs``
        (``kwargs.update(looped=True)``, ``kwargs["looped"] = True``)."""
        stars = [a for a in call.args if a.star]
        if len(stars) != 1 or stars[0].star != "**" or type(stars[0].value) is not cst.Name:
            return None
        function = self.ctx.tree.enclosing_function(call)
        star = function.params.star_kwarg if function is not None else None
        if not isinstance(star, cst.Param):
            return None
        names = {stars[0].value.value}
        if star.name.value not in names:  # `chunk_kwargs = kwargs.copy()`: the same keys
            binding = self.ctx.bindings.reaching(stars[0].value.value, call)
            value = binding.value if binding is not None and binding.kind == "assign" else None
            copied = value.func.value if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "copy" \
                else value.args[0].value if type(value) is cst.Call and dotted(value.func) == "dict" and len(value.args) == 1 else None
            if dotted(copied) != star.name.value:
                return None
            names.add(star.name.value)
        found: list[int | str] = [a.keyword.value if a.keyword is not None else i for i, a in enumerate(call.args)
                                  if not a.star and not _is_none(a.value)]
        for node in self.ctx.tree.descendants(function):  # type: ignore[arg-type]
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in ("update", "setdefault") \
                    and type(node.func.value) is cst.Name and node.func.value.value in names:
                found.extend(a.keyword.value for a in node.args if a.keyword is not None)
                found.extend(a.value.evaluated_value for a in node.args[:1] if node.func.attr.value == "setdefault" and type(a.value) is cst.SimpleString)
            elif type(node) is cst.Assign:
                for target in node.targets:
                    t = target.target
                    if type(t) is cst.Subscript and type(t.value) is cst.Name and t.value.value in names and len(t.slice) == 1 \
                            and type(t.slice[0].slice) is cst.Index and type(t.slice[0].slice.value) is cst.SimpleString:
                        found.append(t.slice[0].slice.value.evaluated_value)
        return tuple(found)

    def _device_args(self, call: cst.Call) -> tuple[tuple[int | str, ...], tuple[tuple[int | str, tuple[str, ...]], ...], tuple[tuple[int | str, Ref], ...]]:
        """Arguments known to live on the device (``sigmas`` from ``get_sigmas_karras(...,
        device=device)``): a callee that reads them into Python waits for the device. Then those
        on the device where the caller's parameters are (``z = self.enc_q(y)`` in
        ``forward(self, y)``): the join follows them to the callers (``Steps.device_params``).
        Then those that are what a call of another object's method returned (whisper's ``logits``
        from ``self.inference.logits(...)``): on the device where the join finds every function
        that call may run returns a device tensor (``CallSite.results``)."""
        found: list[int | str] = []
        conditional: list[tuple[int | str, tuple[str, ...]]] = []
        results: list[tuple[int | str, Ref]] = []
        devices = self.ctx.devices
        for position, arg in enumerate(call.args):
            if arg.star == "*":
                break  # positions after `*args` are unknown (`**kwargs` fills no earlier one)
            if arg.star or _is_none(arg.value) or type(arg.value) in (cst.Integer, cst.Float, cst.SimpleString):
                continue
            where = arg.keyword.value if arg.keyword is not None else position
            params = devices.device_if(arg.value, call)
            if params == () or params is None and devices.moved_member(arg.value, call):
                found.append(where)
            elif params:
                conditional.append((where, params))
            else:
                source = devices.result_elsewhere(arg.value, call)
                target = self.target(source.func, source) if source is not None else None
                if target is not None:
                    results.append((where, target))
        return tuple(found), tuple(conditional), tuple(results)

    def _forwarded_args(self, call: cst.Call) -> tuple[tuple[int | str, str], ...]:
        """Arguments that are the calling function's own parameters, not rebound before the
        call (``get_mask(x, lengths)`` in ``forward(self, x, lengths)``; ``h, cache =
        self.attn(x, cache)`` rebinds it after): an upload its caller made reaches the callee too."""
        found: list[tuple[int | str, str]] = []
        bindings = self.ctx.bindings
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            value = arg.value
            if type(value) is not cst.Name:
                continue
            bound = bindings.lookup(value.value, call)
            if sum(b.kind == "param" for b in bound) == 1 and all(b.kind == "param" or self._bound_after(b.node, call) for b in bound):
                found.append((arg.keyword.value if arg.keyword is not None else position, value.value))
        return tuple(found)

    def _own_settings(self, call: cst.Call) -> tuple[tuple[int | str, str, str], ...]:
        """Arguments that are a setting of the calling function's own config parameter
        (``CoCaLoss(clip_loss_weight=args.coca_contrastive_loss_weight)`` in ``create_loss(args)``):
        (position or keyword, the parameter, the setting). Its callers' files hold the default."""
        caller = self.ctx.tree.enclosing_function(call)
        found: list[tuple[int | str, str, str]] = []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            value = arg.value
            if type(value) is not cst.Attribute or type(value.value) is not cst.Name:
                continue  # (`self.args.x`: the object's, kept in `__init__`; not what this call's caller was passed)
            where = arg.keyword.value if arg.keyword is not None else position
            source = self.ctx.constants.setting_source(dotted(value) or "", call)
            if source is not None and source[0] is caller:  # (a parameter of an enclosing function: its closure's callers are others)
                found.append((where, source[1], source[2]))
            elif caller is not None and value.value.value in CONFIG_NAMES and self._parsed_here(value.value, caller):
                found.append((where, "", value.attr.value))  # `args = get_args()` in the caller: the parsing file's default
        return tuple(found)

    def _kept_params(self, call: cst.Call) -> tuple[tuple[int | str, str, str, str], ...]:
        """Arguments that are an attribute of ``self`` its class keeps only from its constructor's parameter
        (``TranslationBuilder(self.vocab, 1, self.replace_unk)`` in a ``Translator`` method, ``self.replace_unk =
        replace_unk`` in ``Translator.__init__``): (position or keyword, ``Cls.__init__``, the parameter, the attribute)."""
        found: list[tuple[int | str, str, str, str]] = []
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            value = arg.value
            if type(value) is not cst.Attribute or type(value.value) is not cst.Name or value.value.value != "self":
                continue
            kept = self.ctx.devices.constructor_parameter(value)
            # (`translator.replace_unk = True` in this file: set on an object after it is built, not only constructed)
            if kept is None or value.attr.value in self.ctx.guards.set_on_objects():
                continue
            init, _, param = kept.rpartition(":")
            found.append((arg.keyword.value if arg.keyword is not None else position, init, param, value.attr.value))
        return tuple(found)

    def _parsed_here(self, namespace: cst.Name, caller: cst.FunctionDef) -> bool:
        """Is ``namespace`` bound once in ``caller``, to what a call returns (``args = get_args()``,
        ``args = parser.parse_args()``), and nowhere else? Its settings hold the parser's defaults."""
        bound = self.ctx.bindings.lookup(namespace.value, namespace)
        return len(bound) == 1 and bound[0].kind == "assign" and bound[0].element is None and type(bound[0].value) is cst.Call \
            and self.ctx.tree.enclosing_function(bound[0].node) is caller

    def unfollowed_passes(self, followed: set[int], keys: dict[int, str]) -> tuple[tuple[str, str, str, str], ...]:
        """``FileSummary.unfollowed``: for each call the summary records no call site of (a library
        object's, a rare branch's), the keywords it passes a value that may be true: (name called,
        keyword, caller key, the caller's own parameter handed on or "")."""
        found: dict[tuple[str, str, str, str], None] = {}
        for call in self.ctx.tree.nodes(cst.Call):
            if id(call) in followed or not call.args:
                continue
            func = call.func
            name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else None
            if name is None:
                continue
            function = self.ctx.tree.enclosing_function(call)
            caller = keys.get(id(function), "") if function is not None else ""
            # (the caller's own parameters, looked up only where a keyword is passed a name)
            named = function is not None and any(a.keyword is not None and type(a.value) is cst.Name for a in call.args)
            own = dict(self._forwarded_args(call)) if named else {}
            falsy = set(falsy_args(call))
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value not in falsy and not _is_none(arg.value):
                    found[(name, arg.keyword.value, caller, own.get(arg.keyword.value, ""))] = None
        return tuple(found)

    def _bound_after(self, binding: cst.CSTNode, call: cst.Call) -> bool:
        """Is ``binding`` made after ``call`` in source order, outside any loop around the call
        (where a later iteration would pass what it bound)?"""
        tree = self.ctx.tree
        after = tree.index(binding) > tree.index(call) or tree.is_inside(call, binding)  # (`h, cache = ...` holds the call)
        return after and not any(tree.is_inside(binding, loop) for loop in self.ctx.loops.enclosing_loops(call))

    def _may_pass_values(self, call: cst.Call) -> bool:
        """May ``call`` hand its callee a tensor, for a read under ``isinstance(v, torch.Tensor)``
        there (``Conditional.needs_tensor``)? An argument known to live on the device (or where
        the caller's parameters are) says yes (``_call_facts`` asks that first); so does one that may be a tensor
        (``host_arguments.may_be_tensor``: computed in place, or a name bound to such a value or a
        parameter), and a container handed on with ``*``/``**`` not known to hold Python values
        (``**loss_dict`` of losses). A rate read from a schedule (``lr = lr_schedule[it]``) and
        floats read with ``.item()`` are not (dinov2's ``metric_logger.update(lr=lr)``,
        ``update(total_loss=losses_reduced, **loss_dict_reduced)``)."""
        return any(not python_values(self.ctx, arg.value, call) if arg.star else may_be_tensor(self.ctx, arg.value, call) for arg in call.args)


def _may_be_constant(value: cst.BaseExpression) -> bool:
    """``self.alphas``, ``1.0 - self.alphas``, ``WEIGHTS``: what may hold the same value on
    every step (a cheap filter: most arguments are the step's own values)."""
    value_type = type(value)
    if value_type is cst.Attribute:
        return type(value.value) is cst.Name and value.value.value == "self"
    if value_type is cst.Name:
        return value.value.isupper()
    if value_type is cst.BinaryOperation:
        return _may_be_constant(value.left) or _may_be_constant(value.right)
    return False


def falsy_args(call: cst.Call) -> tuple[int | str, ...]:
    """Arguments (position or keyword) passed ``False``, ``0`` or ``""``: a flag left off
    (``None`` counts as left out already: ``given_arguments``)."""
    found: list[int | str] = []
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        value = arg.value
        if type(value) is cst.Name and value.value == "False" or type(value) is cst.Integer and value.value == "0" \
                or type(value) is cst.SimpleString and value.evaluated_value == "":
            found.append(arg.keyword.value if arg.keyword is not None else position)
    return tuple(found)


def literal_args(call: cst.Call) -> tuple[tuple[int | str, object], ...]:
    """Arguments (position or keyword) passed a number, bool, None or string literal, with
    its value (``CallSite.literals``)."""
    found: list[tuple[int | str, object]] = []
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        value = literal(arg.value)
        if value is not None:
            found.append((arg.keyword.value if arg.keyword is not None else position, value[1]))
    return tuple(found)


def _is_none(value: cst.BaseExpression | None) -> bool:
    return type(value) is cst.Name and value.value == "None"


def _arguments_where(call: cst.Call, test: Callable[[cst.BaseExpression], bool]) -> tuple[int | str, ...]:
    """The keyword (or position) of each argument before a splat whose value passes ``test``."""
    found: list[int | str] = []
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        if test(arg.value):
            found.append(arg.keyword.value if arg.keyword is not None else position)
    return tuple(found)
