"""The join's step loops: which loops of the project's summaries repeat a training or inference step, and what they reach."""

from __future__ import annotations

from torchlint.analysis.multiplicity import GENERATION, SEQUENTIAL, Where
from torchlint.analysis.project import Project
from torchlint.analysis.summary import CallSite, LoopSummary, callers_part


def _step_loops(project: Project) -> tuple[dict[tuple[str, str], Where], dict[tuple[str, str], str]]:
    """Loops that are step loops because their own body calls a model of the project
    (``self.policy(obs)``, whose class another module defines) or a function of another
    module that makes one training step; and the loops nested in them. Key -> how often;
    and the loops that are a step themselves (not nested in one) -> what each goes over."""
    loops = {(path, loop.key): loop for path, summary in project.files.items() for loop in summary.loops}
    found: dict[tuple[str, str], Where] = {}
    generating: set[tuple[str, str]] = set()
    reaches = ModelReach(project)
    through: dict[tuple[str, str], list[tuple[str, str]]] = {}  # a loop found through a callee's model runs -> those callees
    for path, summary in project.files.items():
        for call in summary.calls:
            where = (path, call.within)
            loop = loops.get(where) if call.within else None
            # (a loop taken for sampling may still train: `policy.select_action(s)` then `policy.train(buffer)`)
            if loop is None or not loop.may_step or found.get(where, Where.INFER) is not Where.INFER \
                    or call.target[0] not in ("object", "method", "local", "import") or _in_module_forward(project, path, loop):
                continue
            for callee in project.callees(call.target, path):
                if callee[1] in project.files[callee[0]].one_step:
                    # (a loop its own file shows evaluating, under no_grad, after `.eval()`, in
                    # `evaluate()`, runs the step function with its training off: score_sde's
                    # `eval_step = get_step_fn(sde, train=False)`)
                    found[where] = Where.EVAL if loop.where is Where.EVAL else Where.TRAIN
                elif reaches.trains(callee) and loop.where is not Where.EPOCH and (where not in found or _calls_a_model(call, callee) or reaches(callee)):
                    # a training step a few calls deep (a backward, an optimizer step: dreamerv3's
                    # `for _ in range(steps): self._train(next(self._dataset))` in the agent's `__call__`
                    # that an environment loop runs every step): each iteration is one training step,
                    # whatever else the loop or its caller samples. (Not an epoch loop, whose own calls
                    # run once per epoch around the loop of steps: imagen's `trainer.valid_step(...)`.)
                    found[where] = Where.EVAL if loop.where is Where.EVAL else Where.TRAIN
                elif _scans_a_parameter(call, loop, callee):
                    # a helper's loop calling what its caller hands it (dreamerv3's `static_scan(fn, inputs, start)`
                    # over time steps): it runs the caller's function once per iteration within the caller's step, no step of its own
                    continue
                elif where in found:
                    if _calls_a_model(call, callee) or reaches(callee):  # (what else makes it a step: `_drop_loops_over_runs`)
                        through.setdefault(where, []).append(None if _calls_a_model(call, callee) else callee)
                    continue
                elif _calls_a_model(call, callee):
                    found[where] = loop.where or Where.BATCH  # a model's forward
                    through.setdefault(where, []).append(None)
                elif reaches(callee) or reaches.generates(callee):
                    # (a method that decodes in a loop of its own, `self.lm.continue_from(prompt)` with `self.lm`
                    # a constructor's parameter annotated `lm: LMModel`: one whole generation per call)
                    # `self.inference.logits(seq)`, `predict(x)` of a module-level model: a function
                    # that runs a model once per call, so once per request, token or sample: an
                    # inference step unless the loop trains.
                    # Its outermost loop in the function is the step (`for t in range(max_len):`
                    # around `for seq in beams:`): the loops inside it repeat within the step.
                    # An epoch loop is no decode loop: what it calls runs once per epoch.
                    # A loop of decoded tokens or denoising steps, or a `while` loop (`while not done:`
                    # stepping an environment), is the step itself: a loop around it goes over
                    # generations or episodes. So is a loop whose call runs a whole generation (read_fast's
                    # `for j, text in enumerate(texts): gen = tts.tts(text)`): a loop around it goes over other work.
                    generation = reaches.generates(callee)
                    while not generation and loop.where is not Where.EPOCH and loop.over not in SEQUENTIAL and not loop.until and loop.parent in {k for p, k in loops if p == path} \
                            and loops[(path, loop.parent)].where is not Where.EPOCH:
                        where, loop = (path, loop.parent), loops[(path, loop.parent)]
                    if where not in found:
                        # (an evaluation loop over a loader's batches stays one: dlrm's `inference()`
                        # over `test_ld` through `dlrm_wrap(...)`; a decode loop is sampling)
                        # (around a generation, `model.recognize(x)` decoding each utterance, a sampling loop)
                        # (an evaluation over episodes, an environment's steps, samples its policy too)
                        kept = (Where.TRAIN, Where.EPOCH, Where.EVAL) if loop.batches and loop.over not in SEQUENTIAL \
                            and not reaches.generates(callee) else (Where.TRAIN, Where.EPOCH)
                        found[where] = loop.where if loop.where in kept else Where.INFER
                        if generation and found[where] is Where.INFER and loop.over not in SEQUENTIAL:
                            generating.add(where)  # each iteration a whole generation: its step is a generated sequence
                    through.setdefault(where, []).append(callee)
                else:
                    continue
                break
    _drop_loops_over_runs(found, through, loops)
    roots = dict(found)
    for (path, key), loop in loops.items():  # loops inside a step loop run every step too
        parent = (path, loop.parent)
        while parent in loops and parent not in roots:
            parent = (path, loops[parent].parent)
        if parent in roots and (path, key) not in found:
            found[(path, key)] = found[parent]
    return found, {root: GENERATION if root in generating else _step_unit(loops[root], found[root]) for root in roots}


def _drop_loops_over_runs(found: dict[tuple[str, str], Where], through: dict[tuple[str, str], list[tuple[str, str] | None]],
                          loops: dict[tuple[str, str], LoopSummary]) -> None:
    """Drop the sampling loops found only through functions that have a step loop of their own, one of
    windows or requests, no token loop: whisper's ``for audio_path in ...: transcribe(model, audio_path)``,
    whose ``transcribe`` runs the model once (language detection) before its own loop over 30-s windows.
    Each iteration is a whole run of those steps, as a loop around a training run goes over runs: what
    the function does outside its own loop runs once per run, not per step. (A function whose own step
    loop decodes tokens is one generation: a loop around it still goes over generations.)"""
    stepping = {(path, key.partition("#")[0]) for (path, key) in found if loops[(path, key)].over not in SEQUENTIAL}
    for where, callees in through.items():
        if found.get(where) is Where.INFER and None not in callees \
                and all(callee in stepping and callee != (where[0], where[1].partition("#")[0]) for callee in callees):
            del found[where]


def _scans_a_parameter(call: CallSite, loop: LoopSummary, callee: tuple[str, str]) -> bool:
    """Is ``call`` a call of its function's own parameter (``fn(last, *inp(index))``) in a loop over
    neither a loader's batches nor until a condition (an environment's episode), running a function or
    method its callers hand it: a scan, not a step loop? (A model handed in is no scan: stylegan2's
    `extract_features(loader, inception, device)` over `tqdm(loader)` evaluates it once per batch.)"""
    target = call.target
    passed = callers_part(target[1]) if target[0] == "object" else target
    return target[0] == "object" and target[2] == "__call__" and passed[0] == "passed" and len(passed) == 3 \
        and passed[1] == call.caller and not loop.batches and not loop.until \
        and callee[1].rpartition(".")[2] not in ("forward", "__call__")


def _step_unit(loop: LoopSummary, where: Where) -> str:
    """What one iteration of a step loop is: what it goes over, or an evaluation batch."""
    return "evaluation batch" if where is Where.EVAL and loop.over in ("iteration", "member") else loop.over


def _in_module_forward(project: Project, path: str, loop: LoopSummary) -> bool:
    """Does ``loop`` run within each call of a model, a class whose being an ``nn.Module`` shows
    only through its bases in other files (detectron2's cascade stages in
    ``CascadeROIHeads._forward_box``)? Then it is no step of its own: the step that calls the model is."""
    return bool(loop.forward_of) and project.is_module(path, loop.forward_of)


class ModelReach:
    """Does a function run a model's ``forward`` once per call (in its body, not in a loop of
    its own), itself or through the functions it calls, a few calls deep? Memoised."""

    _DEPTH = 3

    def __init__(self, project: Project) -> None:
        self.project = project
        self.memo: dict[tuple[str, str], bool] = {}
        self.training: dict[tuple[str, str], bool] = {}
        self.calls: dict[tuple[str, str], list[CallSite]] = {}
        # Functions with a training or evaluation loop of their own (yolov5's `train()`: its epochs
        # and batches; timm's `validate()`: a warm-up forward, then a loop over its loader) are a
        # whole run: a loop around their call goes over runs (hyperparameter evolution, a sweep over
        # models, a retry with a smaller batch), not steps. (A decode loop of its own makes a
        # function one generation: a loop over inputs around it is still an inference loop, each
        # of its iterations a generation.)
        self.runs = {(path, call.caller) for path, summary in project.files.items() for call in summary.calls
                     if call.loop in (Where.TRAIN, Where.EPOCH, Where.EVAL)}
        # functions with a decode or sampling loop of their own: one generation per call
        self.decoders = {(path, call.caller) for path, summary in project.files.items() for call in summary.calls if call.loop is Where.INFER}
        for path, summary in project.files.items():
            for call in summary.calls:
                # A call in a loop of its own makes the function a whole run or epoch, not a step.
                if call.caller and call.loop is None and not call.within:
                    self.calls.setdefault((path, call.caller), []).append(call)

    def trains(self, function: tuple[str, str], depth: int = 0) -> bool:
        """Is ``function`` a training step: it makes one (``FileSummary.one_step``), or runs a
        backward or an optimizer step and is no whole run, itself or through the functions it
        calls, a few calls deep?"""
        known = self.training.get(function)
        if known is not None:
            return known
        self.training[function] = False  # recursion ends here
        summary = self.project.files.get(function[0])
        found = summary is not None and (function[1] in summary.one_step or function[1] in summary.trains and function not in self.runs)
        if not found and depth < self._DEPTH and function not in self.runs:
            found = any(self.trains(callee, depth + 1) for call in self.calls.get(function, ())
                        for callee in self.project.callees(call.target, function[0]) if callee != function)
        self.training[function] = found
        return found

    def generates(self, function: tuple[str, str], depth: int = 0) -> bool:
        """Does ``function`` run a decode or sampling loop, itself or through the functions it
        calls, a few calls deep (a beam search behind ``model.recognize(x)``)?"""
        if function in self.decoders:
            return True
        calls = self.calls.get(function, ())
        if any(call.target[0] == "object" and call.target[-1] == "generate" for call in calls):
            return True  # a model's `.generate(...)` (a library's, Hugging Face's): a whole generation, as in its own file
        return depth < self._DEPTH and any(self.generates(callee, depth + 1) for call in calls
                                           for callee in self.project.callees(call.target, function[0]) if callee != function)

    def __call__(self, function: tuple[str, str], depth: int = 0) -> bool:
        known = self.memo.get(function)
        if known is not None:
            return known
        if function in self.runs:
            return False
        self.memo[function] = False  # recursion ends here
        found = False
        for call in self.calls.get(function, ()) if depth < self._DEPTH else ():
            for callee in self.project.callees(call.target, function[0]):
                if _calls_a_model(call, callee) or self(callee, depth + 1):
                    found = True
                    break
            if found:
                break
        self.memo[function] = found
        return found


def _calls_a_model(call: CallSite, callee: tuple[str, str]) -> bool:
    """Does ``call`` run a model's ``forward`` by calling the model (``model(x)``, ``self.net(x)``,
    ``self.model.mask_decoder(x)``: a module the object's class keeps), not a method of
    another name?"""
    return callee[1].rsplit(".", 1)[-1] == "forward" and (call.target[-1] in ("__call__", "forward") or call.target[0] in ("method", "object"))


def _loop_where(where: Where, project: Project, callee: tuple[str, str]) -> Where:
    """A loop that only calls the step function is a training loop when that function
    trains (``for x, y in loader: train_step(x, y)``)."""
    if where is Where.BATCH and callee[1] in project.files[callee[0]].trains:
        return Where.TRAIN
    return where
