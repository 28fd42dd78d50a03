"""What the callees of a reference do, over the project's resolution: decode from a cache, return a
host value or a device tensor, build on the host; and what an object's classes keep on the host."""

from __future__ import annotations

from torchlint.analysis.join_loops import ModelReach
from torchlint.analysis.project import Project
from torchlint.analysis.summary import Ref
from torchlint.analysis.weight_kinds import BUFFERS


def decodes_from_a_cache(project: Project, ref: Ref, importer: str) -> bool:
    """Does a decoder's call of ``ref`` (``self.decoder.step(ys, memory)``, ``self.model(ys)``)
    run a method of a project class that takes a key-value cache or a start position, or of a
    class that keeps one (``ClassSummary.cache_methods``, ``keeps_cache``; its project bases too)?"""
    for path, key in _each_callee(project, ref, importer):
        class_key, _, method = key.rpartition(".")
        for _, cls in project.mro(path, class_key) if class_key in project.classes.get(path, {}) else ():
            if cls.keeps_cache or method in cls.cache_methods:
                return True
    return False


def queues_work(project: Project, ref: Ref, importer: str, reach: ModelReach) -> bool:
    """Does some function a call of ``ref`` may run (each of an ``("each", refs)``'s) run a backward, an
    optimizer step or a model's ``forward``, itself or a few calls deep (mae's ``loss_scaler(loss, optimizer)``
    of a ``NativeScalerWithGradNormCount`` its caller passes, whose ``__call__`` steps the scaler)?"""
    for one in ref[1] if ref[0] == "each" else (ref,):
        for path, key in project.callees(one, importer):
            if key in project.files[path].trains or reach.trains((path, key)) or reach((path, key)):
                return True
    return False


def returns_host(project: Project, ref: Ref, importer: str, element: int = -1) -> bool:
    """Does every function a call of ``ref`` may run (at least one) return host values only
    (``FileSummary.host_results``: RWKV's ``sample_logits``, ``torch.multinomial`` of
    ``softmax(torch.tensor(out))``, a tensor built on the host from a list)? With ``element``, at that
    position of the tuple it returns (``FileSummary.host_returns``: a decoder's ``lengths.tolist()``)."""
    callees = _each_callee(project, ref, importer)  # (an attribute set in two ways: each)
    if element >= 0:
        return bool(callees) and all((key, element) in project.files[path].host_returns for path, key in callees)
    return bool(callees) and all(key in project.files[path].host_results for path, key in callees)


def ends_drained(project: Project, ref: Ref, importer: str, depth: int = 0) -> bool:
    """Does every function a call of ``ref`` may run (at least one) end drained: a sync or a device
    read after its last device work (``FileSummary.drained_ends``: a timer's ``stop()`` ending in
    ``torch.cuda.synchronize()``), or a tail call of a function that does (``drained_tails``, a few
    calls deep)? A read right after such a call waits for almost nothing."""
    callees = _each_callee(project, ref, importer)
    return bool(callees) and all(_ends_drained(project, path, key, depth) for path, key in callees)


def _ends_drained(project: Project, path: str, key: str, depth: int) -> bool:
    summary = project.files[path]
    if key in summary.drained_ends:
        return True
    tail = next((ref for tail_key, ref in summary.drained_tails if tail_key == key), None)
    return tail is not None and depth < _DRAIN_DEPTH and ends_drained(project, tail, path, depth + 1)


# How many calls deep a tail call is followed (`self.sync_all()` -> `misc.synchronize()` -> ...): a cycle stops there too.
_DRAIN_DEPTH = 4


def builds_on_host(project: Project, ref: Ref, importer: str, positional: int, keywords: tuple[str, ...], star: bool) -> bool:
    """Does every function a call of ``ref`` may run (at least one) build what it returns on the
    host with a factory (``FileSummary.host_helpers``), the call passing none of them the device
    parameter that factory is given (wenet's ``subsequent_mask(i)``, ``device`` left at the CPU)?"""
    callees = _each_callee(project, ref, importer)
    if not callees:
        return False
    for path, key in callees:
        helper = next((h for h in project.files[path].host_helpers if h[0] == key), None)
        if helper is None:
            return False
        _, device, position = helper
        if device and (star or device in keywords or 0 <= position < positional):
            return False  # the caller may give it the device
    return True


def returns_device(project: Project, ref: Ref, importer: str) -> bool:
    """Does every function a call of ``ref`` may run (at least one) return a device tensor
    (``FileSummary.device_results``: whisper's ``PyTorchInference.logits``, whose
    ``self.model.decoder(...)`` runs a module's ``forward``)?"""
    callees = _each_callee(project, ref, importer)
    return bool(callees) and all(_returns_device(project, path, key) for path, key in callees)


def buffers_only(project: Project, ref: Ref, importer: str) -> bool:
    """Is ``ref`` (a module's constructor) a project class that registers buffers and no weights
    (``ClassSummary.weights`` ``BUFFERS``: rl_games' ``RunningMeanStd``)? False for a library's class.
    ``self.norm`` of a class (a ``("method", class, "norm")`` ref, no method of that name): what the
    class, its project bases and subclasses keep there, and where one only copies it from another
    object (``self.value_mean_std = self.model.value_mean_std``, ``ClassSummary.copies``), what every
    class of the project keeps under that name: each (at least one) such a class."""
    if ref[0] == "method":
        return _kept_buffers(project, importer, ref[1], ref[2])
    owner = project.class_of(ref, importer, 0)
    cls = project.classes.get(owner[0], {}).get(owner[1]) if owner is not None else None
    return cls is not None and cls.weights == BUFFERS


def _kept_buffers(project: Project, path: str, class_key: str, attr: str) -> bool:
    if class_key not in project.classes.get(path, {}) or project.method(path, class_key, attr) is not None:
        return False  # (a method of the class, or no class the project knows)
    holders = [*project.mro(path, class_key), *((p, project.classes[p][k]) for p, k in project.subclasses(path, class_key))]
    kept = [(p, ref) for p, cls in holders for name, ref in cls.attributes if name == attr]
    if any(attr in cls.copies for _, cls in holders):  # (copied from an object of a class the summary does not name: any keeping it)
        kept += [(p, ref) for p, classes in project.classes.items() for cls in classes.values() for name, ref in cls.attributes if name == attr]
    return bool(kept) and all(ref[0] != "method" and buffers_only(project, ref, p) for p, ref in kept)


def _each_callee(project: Project, ref: Ref, importer: str) -> list[tuple[str, str]]:
    """What a call of ``ref`` may run, a target of several (``("each", refs)``: what an attribute set
    in two ways holds) counting each; none where one of them runs nothing the project knows."""
    found: list[tuple[str, str]] = []
    for one in ref[1] if ref[0] == "each" else (ref,):
        callees = project.callees(one, importer)
        if not callees:
            return []
        found.extend(callees)
    return found


def _returns_device(project: Project, path: str, key: str) -> bool:
    """Does the function return a device tensor, each call it returns running modules' ``forward`` only?"""
    needed = dict(project.files[path].device_results).get(key)
    if needed is None:
        return False
    for ref in needed:
        callees = _each_callee(project, ref, path)
        if not callees or not all(method.endswith(".forward") and project.is_module(where, method.rpartition(".")[0]) for where, method in callees):
            return False  # a method, or what an attribute holds, that is no module: its result may be anything
    return True


def keeps_host_tensor(project: Project, ref: Ref, importer: str, attribute: str) -> bool:
    """Does some class the object ``ref`` may be keep a host tensor in ``attribute``, set only where it is built
    (``FileSummary.host_attributes``; its project bases' too)? score_sde's ``sde`` of ``LangevinCorrector``, a
    ``VPSDE`` or a ``VESDE`` its callers pass: the VPSDE's ``alphas``. (A class without the attribute cannot be
    the one moved there: the line would raise.)"""
    for path, class_key in project.classes_of(ref, importer, 1):
        for owner_path, owner in project.mro(path, class_key):
            if (owner.key, attribute) in project.files[owner_path].host_attributes:
                return True
    return False
