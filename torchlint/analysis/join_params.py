"""What the project join knows about the values its calls pass (part of :mod:`torchlint.analysis.join`):
constructor and function parameters every call in the project gives a host value, a device
value, a Python list or a container of device tensors; functions that return host values; files whose steps run on the host
only. Plain facts over the file summaries, no libcst."""

from __future__ import annotations

from typing import Callable

from torchlint.analysis.frameworks import HOOK_METHOD_NAMES
from torchlint.analysis.project import Project
from torchlint.analysis.project_callees import returns_device
from torchlint.analysis.summary import ELEMENTS, HOSTED, LISTED, RETURNED, CallSite


def host_params(project: Project) -> frozenset[tuple[str, str]]:
    """The constructor parameters every construction of their class in the project passes a
    host value (``RingGNNEquivLayer(device, m, n)`` with ``n`` a ``torch.LongTensor``): an
    attribute set from one is a host tensor, whatever ``module.to(device)`` later moves."""
    verdict: dict[tuple[str, str], bool] = {}
    for path, summary in project.files.items():
        for call in summary.calls:
            if call.target[0] not in ("import", "local") or not str(call.target[-1]).rsplit(".", 1)[-1][:1].isupper():
                continue
            owner = project.class_of(call.target, path, 1)
            if owner is None:
                continue
            init = f"{owner[1]}.__init__"
            names = project.params.get(owner[0], {}).get(init)
            if not names:
                continue
            names = names[1:] if names[:1] == ("self",) else names
            host = {where if isinstance(where, str) else names[where] for where in call.host_args if isinstance(where, str) or where < len(names)}
            for name in names:
                key = (owner[0], f"{init}:{name}")
                verdict[key] = verdict.get(key, True) and name in host
    return frozenset(key for key, host in verdict.items() if host)


def host_call_params(project: Project) -> frozenset[tuple[str, str]]:
    """(file, ``f:hosted:param``) for the parameters of functions and methods every call in the project
    passes a host value (``CallSite.host_args``: audiocraft's ``audio_write(path, wav.cpu())``), or
    one on the host where the caller's own parameters are (``CallSite.hosts_if``: ``add_sample(wav)``
    of ``for wav in wavs`` in ``add_samples(wavs)``, each of whose calls passes ``estimate.cpu()``):
    the least fixed point, from the host copies down the helpers. A read there waits for no device
    (``Report.unless_host``). One call passing anything else (a device tensor, a value not known),
    a call leaving it out only, a function used as a value (called where no call site shows) or
    never called keeps it out."""
    if not any(call.host_args or call.hosts_if for summary in project.files.values() for call in summary.calls):
        return frozenset()
    valued = {name for summary in project.files.values() for name in summary.valued}
    # (callee key) -> per call: the caller's parameters that must be host values for it to pass one (None: it passes no host value)
    passes: dict[tuple[str, str], list[tuple[tuple[str, str], ...] | None]] = {}
    for path, summary in project.files.items():
        for call in summary.calls:
            for callee in project.callees(call.target, path):
                if callee[1].rsplit(".", 1)[-1] in valued:
                    continue  # (called through a value too: those calls are not seen, the function is kept out below)
                names = project.parameters(call, callee)
                host = _passed_on_host(call, names)
                left_out = project.omitted(call, callee) - host.keys()
                for name in names:
                    if name in left_out:
                        continue  # `write(wav)` for `write(wav, ref=None)`: nothing passed, nothing read; the others decide
                    passes.setdefault((callee[0], f"{callee[1]}:{name}"), []).append(
                        tuple((path, f"{call.caller}:{need}") for need in host[name]) if name in host else None)
    found: set[tuple[str, str]] = set()
    changed = True
    while changed:  # each round adds the parameters whose every call is now known to pass a host value
        changed = False
        for key, calls in passes.items():
            if key not in found and all(c is not None and all(need in found for need in c) for c in calls):
                found.add(key)
                changed = True
    return frozenset((path, f"{function}:{HOSTED}{name}") for path, key in found for function, _, name in (key.rpartition(":"),)
                     if function.rsplit(".", 1)[-1] not in valued)


def _passed_on_host(call: CallSite, names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The callee's parameters (by name) ``call`` passes a host value, each with the caller's
    parameters that must be host values for it to be one (none: it is one)."""
    host: dict[str, tuple[str, ...]] = {}
    for where, needs in (*((w, ()) for w in call.host_args), *call.hosts_if):
        name = where if isinstance(where, str) else names[where] if where < len(names) else None
        if name is not None and name not in host:
            host[name] = needs
    return host


def host_returned(project: Project) -> frozenset[tuple[str, str]]:
    """(file, ``returned:name#element``) where the function a call of that file names returns a
    host value at that element (``FileSummary.host_returns``): a read of it waits for no device
    (analysis/host_returns.py, ``Report.unless_host``)."""
    made = {(path, key, element) for path, summary in project.files.items() for key, element in summary.host_returns}
    if not made:
        return frozenset()
    found: set[tuple[str, str]] = set()
    for path, summary in project.files.items():
        for call in summary.calls:
            if call.target[0] not in ("import", "local"):
                continue
            callee = project.function(call.target, path)
            if callee is None:
                continue
            name = str(call.target[-1]).rsplit(".", 1)[-1]
            found.update((path, f"{RETURNED}{name}#{element}") for where, key, element in made if (where, key) == callee)
    return frozenset(found)


def constructed(project: Project) -> frozenset[tuple[str, str]] | None:
    """The classes of the project that some of its code builds: called (``Block(dim)``, one of
    a table's ``MODELS[name](...)``), kept on an object, handed to a call, or registered by a
    decorator. A module class none of them names (CLIP's ``AttentionPool2d`` kept in a
    diffusion UNet's file) never runs in this project. None where some file builds classes
    from names (a config's ``target``): any may be built."""
    if any(summary.by_name for summary in project.files.values()):
        return None
    found: set[tuple[str, str]] = {(path, key) for path, summary in project.files.items() for key in summary.registered}
    for path, summary in project.files.items():
        refs: list = [ref for _, ref in (attribute for cls in summary.classes for attribute in cls.attributes)]
        for call in summary.calls:
            refs.extend(call.target[1] if call.target[0] == "each" else (call.target,))
            refs.extend(ref for _, ref in call.args)
        for ref in refs:
            if ref[0] in ("local", "import", "each"):
                found.update(project.classes_of(ref, path, 1))
    return frozenset(found)


def never_built(project: Project) -> frozenset[tuple[str, str]]:
    """The classes the project never builds (deit's ``Learned_Aggregation_Layer_multi``): named
    only by their own ``class`` statement in their file (``FileSummary.unnamed``), built by no code
    of the project (``Project.built``), imported by no other file, in no module another file
    star-imports, subclassed nowhere but by classes never built either. Only in an application (some file trains or samples): a
    library's classes are its users' to build. None where some file builds classes from names."""
    files = project.files
    if project.built is None or not any(summary.unnamed for summary in files.values()):
        return frozenset()
    if not any(summary.trains_anywhere or summary.samples_anywhere for summary in files.values()):
        return frozenset()  # a library of models: its users build them
    candidates = {(path, key) for path, summary in files.items() for key in summary.unnamed if (path, key) not in project.built}
    if not candidates:
        return frozenset()
    named: set[tuple[str, str]] = set()
    starred: set[str] = set()
    for path, summary in files.items():
        for _, ref in summary.exports:  # `from .models import Block` (a package's `__init__` too: its users may build it)
            named.update(project.classes_of(ref, path, 1))
        for level, module in summary.stars:  # `from .models import *`: any name of that module may be used
            found = project.module_file(module, path, level)
            if found is not None:
                starred.add(found)
    kept = {c for c in candidates if c not in named and c[0] not in starred}
    # subclassed nowhere, or only by classes never built either (ImageBind's `Attention` under an unused `ViTAttention`)
    return frozenset(c for c in kept if all(sub in kept for sub in project.subclasses(*c)))


def device_params(project: Project) -> frozenset[tuple[str, str]]:
    """The parameters every call of their function in the project passes a tensor on the device
    (a sampler's ``sigmas``, made by ``get_sigmas_karras(..., device=device)`` in the function that
    picks the sampler): what the function reads of them into Python waits for the device. A call
    that passes one through ``*args`` passes no device tensor there; one that leaves it out (or
    passes None) passes nothing to read (``HiddenSyncs.device_parameters`` asks only of parameters
    without a default or defaulting to None): the others decide, one of them at least. An argument
    on the device where its caller's parameters are (``CallSite.devices_if``: vits' ``z =
    self.enc_q(y)`` in ``forward(self, y)``, given to ``rand_slice_segments(z)``) counts once those
    parameters are found: the least fixed point, from the model's input down the helpers."""
    if not any(call.devices or call.devices_if or call.results for summary in project.files.values() for call in summary.calls):
        return frozenset()  # no call passes a device tensor anywhere: no need to resolve every call of the project
    # (callee key) -> per call: the caller's key, the parameters it passes on the device, and
    # those it passes on the device where the caller's own parameters named are
    passes: dict[tuple[str, str], list[tuple[str, tuple[str, ...]] | None]] = {}
    resolved = [(path, call, project.callees(call.target, path)) for path, summary in project.files.items() for call in summary.calls]
    called = {callee for _, _, callees in resolved for callee in callees}
    for path, call, callees in resolved:
        for callee in callees:
            names = project.parameters(call, callee)
            device = passed_on_device(call, names, project, path)
            left_out = project.omitted(call, callee) - device.keys()
            for name in names:
                if name in left_out:
                    continue  # `model(idx)` for `forward(idx, input_pos=None)`: no tensor passed, none read
                if device.get(name) and _never_called(call.caller, path, called):
                    # so-vits-svc's `rand_slice_segments(x)`, which nothing calls, passes `slice_segments` an index on
                    # `x`'s device: what no call gives it cannot say, and no step runs it; the other calls decide
                    continue
                passes.setdefault((callee[0], f"{callee[1]}:{name}"), []).append(
                    (path, tuple(f"{call.caller}:{need}" for need in device[name])) if name in device else None)
    found: set[tuple[str, str]] = set()
    changed = True
    while changed:  # each round adds the parameters whose every call is now known to pass the device
        changed = False
        for key, calls in passes.items():
            if key not in found and all(c is not None and all((c[0], need) in found for need in c[1]) for c in calls):
                found.add(key)
                changed = True
    return frozenset(found)


def _never_called(caller: str, path: str, called: set[tuple[str, str]]) -> bool:
    """Is ``caller`` a function of ``path`` that no call of the project runs: a plain function, or a
    method no framework runs by its name (not a dunder, ``forward``/``backward``, a framework's hook:
    StyleTTS2's ``ADPM2Sampler.inpaint``, kept as a value by a class nothing builds, does not keep
    its ``step`` from the device sigmas ``forward`` gives it)? (Not a script's top level.)"""
    if not caller or (path, caller) in called:
        return False
    name = caller.rpartition(".")[2]
    return "." not in caller or not name.startswith("__") and name not in ("forward", "backward") and name not in HOOK_METHOD_NAMES


def listed_params(project: Project) -> frozenset[tuple[str, str]]:
    """(file, ``f:listed:param``) for the parameters every call of their function in the project
    passes a Python list (``CallSite.lists``; at least one call, none leaving it out): an index
    a device tensor is given there is copied over on each call (TL114, whisper's
    ``rearrange_kv_cache(source_indices)``)."""
    return _passed_by_every_call(project, lambda call: call.lists, LISTED)


def element_params(project: Project) -> frozenset[tuple[str, str]]:
    """(file, ``f:elements:param``) for the parameters every call of their function in the project
    passes a dict or a list of device tensors (``CallSite.elements``; at least one call, none leaving
    it out): demucs' ``averager(losses)`` with ``losses["reco"] = reco.mean()``, whose ``float(value)``
    per metric waits for the device once per value."""
    return _passed_by_every_call(project, lambda call: call.elements, ELEMENTS)


def _passed_by_every_call(project: Project, marked: Callable[[CallSite], tuple[int | str, ...]], tag: str) -> frozenset[tuple[str, str]]:
    """(file, ``f:<tag>param``) for the parameters that every call of their function marks (by position
    or keyword, as ``marked`` reads the call site): one call that leaves it out or passes something
    else keeps the parameter out."""
    if not any(marked(call) for summary in project.files.values() for call in summary.calls):
        return frozenset()
    verdict: dict[tuple[str, str], bool] = {}
    for path, summary in project.files.items():
        for call in summary.calls:
            for callee in project.callees(call.target, path):
                names = project.parameters(call, callee)
                held = {where if isinstance(where, str) else names[where] for where in marked(call) if isinstance(where, str) or where < len(names)}
                for name in names:
                    key = (callee[0], f"{callee[1]}:{tag}{name}")
                    verdict[key] = verdict.get(key, True) and name in held
    return frozenset(key for key, held in verdict.items() if held)


def passed_on_device(call: CallSite, names: list[str] | tuple[str, ...], project: Project, path: str) -> dict[str, tuple[str, ...]]:
    """The callee's parameters (by name) ``call`` passes a device tensor, each with the caller's
    parameters that must be device tensors for it to be one (none: it is one). An argument that
    is what another call returned counts where every function that call may run returns a
    device tensor (``CallSite.results``, ``project_callees.returns_device``)."""
    def named(where: int | str) -> str | None:
        return where if isinstance(where, str) else names[where] if where < len(names) else None

    device: dict[str, tuple[str, ...]] = {}
    returned = (w for w, source in call.results if returns_device(project, source, path))
    for where, needs in (*((w, ()) for w in call.devices), *call.devices_if, *((w, ()) for w in returned)):
        name = named(where)
        if name is not None and name not in device:
            device[name] = needs
    return device


def host_steps(project: Project) -> frozenset[str]:
    """The files whose steps run on the host: the file never names a device and builds its own
    model or data (``FileSummary.host_only``), and no file of the project it calls into places
    anything on a device (a model class whose ``__init__`` moves itself, a loader helper that
    copies batches to the GPU): a model file that never names a device runs on the GPU when such a
    step builds it, and on the host when every step that builds it is a host-only one."""
    found = set()
    for path, summary in project.files.items():
        if summary.names_device:
            continue
        built = [owner for call in summary.calls if call.target[0] in ("import", "local")
                 for owner in (project.class_of(call.target, path, 1),) if owner is not None]
        # (a model class of another file built here, `ac = ActorCritic(obs_dim, act_dim)`, is
        # this file's model as much as one of its own: it sits where this file puts it)
        if not summary.host_only and not any(project.is_module(*owner) for owner in built):
            continue
        reached = {callee[0] for call in summary.calls for callee in project.callees(call.target, path)} | {owner[0] for owner in built}
        if not any(project.files[other].names_device for other in reached if other in project.files):
            found.add(path)
    return frozenset(found)
