"""The step summary of one file: plain frozen data (see :mod:`torchlint.analysis.steps`
for how it is made and :mod:`torchlint.analysis.join` for how summaries are joined)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from torchlint.analysis.multiplicity import Position, Repeat, Where
from torchlint.analysis.samples import SampleWork
from torchlint.analysis.switch_words import Flag, SettingTest
from torchlint.findings import Location, pickled_by_fields

Ref = tuple


def callers_first(passed: Ref, fallback: Ref) -> Ref:
    """``("or", passed, fallback)``: a parameter's objects, the classes its callers pass where any passes
    a project class (their own fallbacks not counted), else ``fallback`` (its default, its annotation)."""
    return ("or", passed, fallback)


def callers_part(ref: Ref) -> Ref:
    """The ``("passed", ...)`` half of a parameter's ``("or", ...)``; any other reference as it is."""
    return ref[1] if ref[0] == "or" else ref
# The names a config object goes by (`args.num_workers`, `cfg.num_workers`): whose settings' defaults are looked up.
CONFIG_NAMES = frozenset({"args", "opt", "opts", "cfg", "config", "conf", "hparams", "hp", "params", "flags", "FLAGS", "options"})
# Libraries whose functions are never the project's own: their calls are not recorded.
_NOT_PROJECT = frozenset({"torch", "numpy", "np", "math", "os", "sys", "typing", "time", "random", "logging", "json", "re", "collections", "functools", "itertools", "pathlib", "copy", "warnings", "tqdm", "transformers", "lightning", "pytorch_lightning", "torchvision", "torchaudio", "torchtext", "pandas", "sklearn", "scipy", "matplotlib", "wandb", "datasets", "accelerate"})
_BUILTINS = frozenset(dir(builtins))


# Calls that find a class (or a module holding one) from a name the program is given
# (`FileSummary.by_name`).
BY_NAME = frozenset({"importlib.import_module", "hydra.utils.instantiate", "hydra.utils.get_class", "hydra.utils.get_method",
                     "pydoc.locate", "eval"})


# The prefix of a `Report.unless_host` key the join holds where the value read is an element a
# function returns on the host (`FileSummary.host_returns`): "returned:make_parameters#2".
RETURNED = "returned:"

# The mark of a parameter a finding holds by where every call passes it a Python list (`Report.if_device`
# entries `listed:name`; the join's `Steps.device_params` keys `f:listed:name`, from `CallSite.lists`).
LISTED = "listed:"

# The mark of a parameter a finding holds by where every call passes it a dict or a list whose values are
# device tensors (`Report.if_device` entries `elements:name`: `for k, v in metrics.items(): float(v)`; the
# join's `Steps.device_params` keys `f:elements:name`, from `CallSite.elements`).
ELEMENTS = "elements:"

# The mark of a parameter a finding is dropped by where every call in the project passes it a host value
# (`Report.unless_host` keys `f:hosted:name`, `Devices.host_parameter`; the join's `Steps.host_params`, from
# `CallSite.host_args`/`hosts_if`, `join_params.host_call_params`). Such a read is not a sure one (`Places.note_reads`)
# only as far as the join drops it: a read after it is after a read either way, unless both are on host values.
HOSTED = "hosted:"

# A call site's unit when its hot loop is an epoch loop whose every iteration is one full-batch step.
FULL_BATCH = "full-batch epoch"

@pickled_by_fields
@dataclass(frozen=True, slots=True)
class CallSite:
    caller: str  # function key; "" at module level
    target: Ref
    loop: Where | None  # how often the hot loop the call is in runs (Where.TRAIN); None: runs when its caller runs
    location: Location | None = None  # hot call sites and calls made by possible hooks (`related`)
    args: tuple[tuple[int | str, Ref], ...] = ()  # arguments that are objects of classes: position or keyword -> class
    tensors: bool = True  # may pass a tensor: an argument known to be one, or `*`/`**` (False: Python values only)
    within: str = ""  # the innermost (not hot) `for`/`while` around a call made outside hot loops: its key
    given: tuple[int, tuple[str, ...]] | None = (0, ())  # positional arguments and keywords passed (not None); None: `*`/`**`
    branch: str = ""  # made only when the caller's parameter of this name is left out (`if max_len is None:`)
    constants: tuple[int | str, ...] = ()  # arguments (position or keyword) that hold the same value on every step
    repeats: tuple[tuple[str, Repeat], ...] = ()  # the loops around it within the step (loop key, what it goes over), outermost first
    position: Position | None = None  # where it sits in the step (None: where its caller's call sits)
    unit: str = "step"  # what one iteration of its hot loop is ("decoded token" for a decode loop, FULL_BATCH)
    # in the loop `within`: the index of the statement holding it in that loop's body (-1: none), so the
    # join knows the calls made before it in the same iteration (a whole generation: join_generations.py)
    turn: int = -1
    uploads: tuple[int | str, ...] = ()  # arguments (position or keyword) the caller just copied from the host (`caplens.to(device)`)
    falsy: tuple[int | str, ...] = ()  # arguments (position or keyword) passed a literal False, 0 or "": a flag left off
    # arguments (position or keyword) passed a number, bool, None or string literal, and its value: a test on the
    # parameter that every call's value fails keeps its branch from running (`method="multistep"`, Guards.flag_of)
    literals: tuple[tuple[int | str, object], ...] = ()
    # `f(x, **kwargs)` with the caller's own `**kwargs`: the arguments it passes itself and the
    # keys the caller sets in `kwargs` (`kwargs.update(flag=True)`); what its callers passed goes on. None: no such pass-through
    forwards: tuple[int | str, ...] | None = None
    feeds_env: bool = False  # its result is (part of) the action an environment's `step` takes (analysis/host_consumers.py)
    # its result is what the caller returns (`return rand() if explore else self.act(s)`): it feeds an environment where the caller's does
    returned: bool = False
    host_args: tuple[int | str, ...] = ()  # arguments (position or keyword) that are host values (`wav.cpu()`, a constructor's `torch.LongTensor`)
    # arguments on the host where the caller's parameters named are (all of them): `wav` of `for wav in wavs`
    # in `add_samples(self, wavs)`, handed to `add_sample(wav)` (`join_params.host_call_params`)
    hosts_if: tuple[tuple[int | str, tuple[str, ...]], ...] = ()
    # arguments that are the caller's own parameters (position or keyword -> its name): what
    # the caller was passed goes on (`self.encoder(x, lengths)` in a `forward(x, lengths)`)
    own_params: tuple[tuple[int | str, str], ...] = ()
    # arguments that are a setting of the caller's own config parameter (`clip_loss_weight=args.coca_contrastive_loss_weight`
    # in `create_loss(args)`): (position or keyword, the parameter, or "" for a namespace the caller parses itself, `args =
    # get_args()`, the setting); the callers' (or the parser's) files hold its default
    own_settings: tuple[tuple[int | str, str, str], ...] = ()
    # arguments that are an attribute the caller's class keeps from its constructor's parameter (`self.replace_unk`, every
    # binding `self.replace_unk = replace_unk` in `__init__`): (position or keyword, `Cls.__init__`, the parameter, the attribute); what the
    # class's constructions pass there goes on (`SettingDefaults`: a switch off wherever the class is built with it off)
    kept_params: tuple[tuple[int | str, str, str, str], ...] = ()
    devices: tuple[int | str, ...] = ()  # arguments (position or keyword) known to be tensors on the device (`Steps.device_params`)
    # arguments on the device where the caller's parameters named are (all of them): `rand_slice(z)`
    # with `z = self.enc_q(y)` in `forward(self, y)`, `torch.rand(b).to(device=x.device)` (`Steps.device_params`)
    devices_if: tuple[tuple[int | str, tuple[str, ...]], ...] = ()
    # made only when the caller's parameter of this name is passed, not None or false (`if kv_cache is not None:`,
    # `0 if kv_cache is None else kv_cache.get_pos()` with `kv_cache=None`): a step that leaves it out never makes it
    opt_in: str = ""
    # made only under a recurring guard of its loop or function that also steps outside it (`if step % 100 == 0:
    # evaluate()` in a training loop): how often the guard lets it run, "every 100 steps (`step % 100`)" (FileSummary.every_n)
    every: str = ""
    lists: tuple[int | str, ...] = ()  # arguments (position or keyword) that are Python lists (`rearrange_kv_cache(source_indices)`)
    # arguments that are (a slice of) what a call of a function the join resolves returned (position or keyword -> that
    # call's target): on the device where every function it may run returns a device tensor (whisper's `logits` from
    # `self.inference.logits(tokens, audio_features)`, `FileSummary.device_results`, `Steps.device_params`)
    results: tuple[tuple[int | str, Ref], ...] = ()
    # arguments (position or keyword) that are a dict or a list of device tensors built in the caller (`losses = {"loss": loss}`,
    # `losses[k] = reco[k]`): a callee reading each value into Python waits once per value (`Steps.device_params`' `elements:` keys)
    elements: tuple[int | str, ...] = ()
    # (caller key, parameter, optional): the switch off by default of its caller (a parameter, or the constructor
    # parameter an attribute holds) it is made only with (`Guards.switch_of`: `if top_k is not None: top_k_logits(...)`);
    # where every call of a function has one that no call turns on, so is the function (`SettingDefaults.called_switched_off`)
    switch: tuple[str, str, bool] | None = None
    # the run's flags it is made only with (`Guards.run_flags`: `if args.gail: discr.update(...)`): (setting, its default
    # off here, tested in a loop); where every call of a function (or construction of its class) has one off by default, so is the function
    run_flags: tuple[tuple[str, bool, bool], ...] = ()
    # the tests of its caller's parameters that the object it calls is built only under (LPIPS' `self.net = L2()` only
    # `elif self.model in ["L2", "l2"]:`, `BranchMembers.member_flags`): where every call fails one, no such object runs
    # (`SettingDefaults.called_switched_off`)
    flags: tuple[Flag, ...] = ()
    # the every-2nd-or-3rd-step guard around it in its step (`Guards.frequent_words`: "but only on every 2nd step
    # (`if self.total_it % self.policy_freq == 0:`, ...)"): no rare guard, its words carried to what it runs (`StepInfo.guard`)
    guard: str = ""
    distributed_only: bool = False  # that guard runs it only in a multi-process run (`if world_size > 1:`: `StepInfo.distributed_only`)
    # made only under a bare truth test of a setting of the run (`if args.gail:`): a mode the run may be launched
    # without, so the words of what it reaches give way to a reach without one (`StepInfo.run_mode`)
    run_mode: bool = False
    # arguments (position or keyword) that may hold None though no literal: a run setting whose argparse default
    # is None (ConvNeXt's `args.clip_grad`): the callee's `if p is None:` branch may run (`ProjectIndex.none_passed`)
    maybe_none: tuple[int | str, ...] = ()
    # a call in a loop of a function of this file that runs the model without grad and brings its results to the host
    # (ogb's full-batch `result = test(model, data, split_idx, evaluator)` every epoch, `StepEvaluations.evaluates`): what
    # it runs, an evaluator's copies too, runs once per evaluation, tiered as an evaluation's, not as the training step's
    evaluates: bool = False
    # the exclusive branches of its function it sits in (`call_arms`: an `if`/`else` pair's two calls run one at a time), so the
    # join sums a function's call sites per run of its caller (`join_counts`); None: any number of times per run (a comprehension's)
    arms: tuple[tuple[int, int], ...] | None = None
    hot_loop: int = -1  # the hot loop it is in (its pre-order index in the file): the step whose calls the join sums (`join_counts`)
    node: int = -1  # the call's pre-order index in its file: the sites one call makes (a container's members, one each) share it
    # a construction through a classmethod's `cls` (`return cls(opt.layers, num_experts=opt.num_experts)` in a base's
    # `from_opt`): it builds whichever class the method is called on, each subclass that inherits it too (SettingDefaults)
    through_cls: bool = False


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class LoopSummary:
    """A ``for``/``while`` loop that is not a hot loop here (and not inside one): the join
    finds it a step loop when its own body calls a model or a training step of another module."""

    key: str  # "Cls.m#loop2"
    parent: str  # the enclosing loop's key, or the function's ("" at module level)
    # how often it runs if it is a step loop; None where the join never reads it (a loop that
    # cannot step, with none inside that may: the summary does not ask)
    where: Where | None
    may_step: bool = True  # False: its body always ends with return/break (it runs at most once), or no call in it may make it a step
    over: str = "iteration"  # what it goes over (analysis/places.py): "decoded token", "beam", ...; "" where `where` is None
    until: bool = False  # a `while` loop: it runs until a condition (an episode's environment steps), each iteration after the last
    forward_of: str = ""  # the class whose `forward` runs it (there or in a method it calls), when only the join can tell it is a module
    batches: bool = False  # it goes over a loader's batches (a loader, or named for batches: `for i, test_batch in enumerate(test_ld)`)


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Hook:
    function: str  # key
    text: str  # "the step function of an ignite `Engine`"
    where: Where = Where.BATCH


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class ClassSummary:
    key: str
    bases: tuple[Ref, ...]
    methods: tuple[str, ...]
    attributes: tuple[tuple[str, Ref], ...] = ()  # objects kept on `self`: name -> class, once per class it may hold (subclasses elsewhere use them)
    test: bool = False  # test code (a test suite's file, a unittest `Test…` class or a class inside one): it exercises a library, it runs no model of its own
    samples: SampleWork | None = None  # a dataset class: what it does for each sample (a loader in another file is tiered by it)
    loader_sets: tuple[str, ...] | None = None  # a class with a base named like a loader: the DataLoader options its `__init__` passes up itself
    weights: str = ""  # a module class: "trainable" (registers weights, never freezes them), "backbone" (a torchvision model's), "frozen", or "" (analysis/frozen.py)
    # A decoder's cache (analysis/decoder_caches.py): the methods that take a key-value cache or a start
    # position, and whether a method keeps one on `self` (`self.cache_k[:b, s:e] = xk`). A decode
    # loop of another file that gives an object of the class its whole sequence decodes from it.
    cache_methods: tuple[str, ...] = ()
    keeps_cache: bool = False
    # methods whose body only raises NotImplementedError: a call of one runs a subclass's override
    # (whisper's `Inference.rearrange_kv_cache`, which `PyTorchInference` implements; `Project.callees`)
    abstract: tuple[str, ...] = ()
    # class attributes bound to a function (whisper's `decode = decode_function`, imported; `predict = forward`):
    # name -> what the function is, a call on an object of the class runs it with the object as its first
    # argument (`Project.method`, `Project.parameters`)
    aliases: tuple[tuple[str, Ref], ...] = ()
    # attributes the class only copies from another object of its own under the same name
    # (`self.value_mean_std = self.model.value_mean_std`): `project_callees.buffers_only` looks the name up
    copies: tuple[str, ...] = ()
    # attributes its methods assign on `self`, and those its `__init__` keeps from a parameter (attribute, parameter):
    # a base's switch is followed through a subclass's `super().__init__(...)` only where no subclass sets it itself
    sets: tuple[str, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()
    # keywords its `__init__` passes up to its base as a literal False (`validate_args`: a distribution that checks nothing)
    passes_off: tuple[str, ...] = ()


# (what each call of a compiled object passes: `CallSite.given`, the functions it is handed to)
CompiledCalls = tuple[tuple[tuple[int, tuple[str, ...]], ...], tuple[tuple[Ref, int | str], ...]]


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class FileSummary:
    path: str  # absolute
    functions: tuple[str, ...]
    classes: tuple[ClassSummary, ...]
    calls: tuple[CallSite, ...]
    hooks: tuple[Hook, ...]
    stars: tuple[tuple[int, str], ...] = ()  # `from m import *`: (level, dotted module)
    exports: tuple[tuple[str, Ref], ...] = ()  # module-level imports, and names bound to a function (`f = g`), others may import from here
    trains: tuple[str, ...] = ()  # functions that call `.backward()` or an optimizer step
    trains_anywhere: bool = False  # a `.backward()` or an optimizer step anywhere in the file, module level too
    samples_anywhere: bool = False  # a hot loop of the file samples (a decode or denoising loop: `Where.INFER`)
    host_only: bool = False  # the file never touches a device (analysis/devices.py)
    names_device: bool = False  # the file places, or may place, something on a device (`Devices.names_device`)
    # attributes the file assigns on an object other than `self` (`translator.replace_unk = True`): a switch a class keeps
    # from its constructor is that constructor's value only where no file sets it so (`CallSite.kept_params`)
    object_sets: tuple[str, ...] = ()
    params: tuple[tuple[str, tuple[str, ...]], ...] = ()  # function key -> positional parameter names
    returns: tuple[tuple[str, tuple[Ref | None, ...]], ...] = ()  # factory key -> classes it returns, by element
    host_results: frozenset[str] = frozenset()  # functions whose every `return` gives a host value (`Devices.returns_host`)
    # functions whose every `return` gives a device tensor (`Devices.returns_device`), each with the targets of the
    # calls it returns that must run a module's `forward` (`self.model.decoder(...)`: `project_callees.returns_device`)
    device_results: tuple[tuple[str, tuple[Ref, ...]], ...] = ()
    loops: tuple[LoopSummary, ...] = ()  # loops whose being per-step the join decides, in source order
    one_step: tuple[str, ...] = ()  # functions that make one whole training step (a loop calling one is a step loop)
    # those of them this file calls by name somewhere (`self.learn(mem)` under any guard, once or every N): their own
    # file decides how often they run; the others are steps of whoever calls them (`join._own_training_steps`)
    one_step_called: tuple[str, ...] = ()
    compiled: tuple[tuple[Ref, str, Ref | None], ...] = ()  # what torch.compile is given here, how, and unless what (analysis/compiled_roots.py)
    not_compiled: tuple[str, ...] = ()  # functions decorated `@torch.compiler.disable`: run eagerly
    # for each of `compiled`, how the code calls the compiled object (analysis/compiled_roots.py):
    # what each call passes it, and the project's functions it is handed to (the callee, the
    # argument's position or keyword); None where it may be called anyhow (kept, returned, wrapped)
    compiled_calls: tuple[CompiledCalls | None, ...] = ()
    # for each of `compiled`, the settings of the run its compile call is made only with (`if args.torchcompile:`), and
    # the function making it ("" at module level, or a decorator's): where none is off, its calls' (`compile_calls`)
    compiled_guards: tuple[tuple[tuple[SettingTest, ...], str], ...] = ()
    # the calls of functions named to compile (`task.compile()`, `maybe_compile(model)`), a test's aside, call sites
    # or not (a branch off by default records none): (name called, target or None, caller key, the settings of the run
    # it is made only with): where every call of the function making a compile call has one off, so is that root
    compile_calls: tuple[tuple[str, Ref | None, str, tuple[SettingTest, ...]], ...] = ()
    switches: tuple[str, ...] = ()  # process-wide switches this file turns (analysis/switches.py): "distribution-validation-off"
    # argparse settings with a literal default (`--num-workers`, 0; `--loss-weight`, 1.0; a `store_true` flag, False;
    # None): a callee's `args.num_workers`
    settings: tuple[tuple[str, object], ...] = ()
    # settings a config object is assigned here (`cfg.num_workers = 0`, yacs' `set_cfg(cfg)`): (name, the integer, None for
    # any other value or two values); with `settings`, what an imported config object holds (`SettingDefaults.assigned_default`)
    assigned: tuple[tuple[str, int | None], ...] = ()
    # builds objects from names at run time (`importlib.import_module`, hydra's `instantiate`,
    # `getattr(module, name)(...)`): any class of the project may be built; and its classes a
    # decorator registers (`@MODELS.register_module()`), built by name
    by_name: bool = False
    registered: tuple[str, ...] = ()
    # its module-level classes that only their `class` statement names (analysis/unnamed_classes.py): built nowhere in the
    # file; the join asks whether any other file imports or builds them (`join_params.never_built`)
    unnamed: tuple[str, ...] = ()
    # `LlamaAttention.forward = forward`: (function key, the library's class, once per layer, the function
    # that makes the assignment or "" at module level) (analysis/patched.py)
    patched: tuple[tuple[str, str, bool, str], ...] = ()
    # calls made only under an every-N guard (`if T % replay_frequency == 0: dqn.learn(mem)`) of a loop
    # or function that steps no optimizer outside it: the join follows them only to a training step
    guarded: tuple[CallSite, ...] = ()
    # calls made only under such a guard of a loop or function that steps outside it too (a periodic
    # evaluation, a checkpoint, a sample): what they run is every N steps (``CallSite.every``), not every step
    every_n: tuple[CallSite, ...] = ()
    # (function key, position of the tuple it returns, -1: the whole value) made on the host in every
    # `return`: a NumPy array or Python value of host data (analysis/host_returns.py)
    host_returns: tuple[tuple[str, int], ...] = ()
    # (function key, its parameter the factory's `device=` is, CPU by default, and that parameter's position, or
    # ("", -1)): functions whose every `return` is a tensor a factory made on the host (`HostTensors.helper_device`)
    host_helpers: tuple[tuple[str, str, int], ...] = ()
    # (class key, attribute): what its classes keep on `self` as a host tensor, set only where the object is built
    # (`self.alphas = 1. - self.discrete_betas`, analysis/host_attributes.py), for another file's move of it (TL113)
    host_attributes: tuple[tuple[str, str], ...] = ()
    # classes this file names only to build objects it never runs as modules (analysis/idle_builds.py):
    # (the class reference, the class whose attribute holds the object or "")
    idle_builds: tuple[tuple[Ref, str], ...] = ()
    # (function key, parameter, defaults to None) for the parameters that default off (False, 0, "", None) and
    # are never bound again: a call handing one on (``CallSite.own_params``) passes only what its own callers pass
    off_defaults: tuple[tuple[str, str, bool], ...] = ()
    # (function key, parameter, default) for the parameters with a literal default (a string, number, bool or None) never
    # bound again: a call leaving one out hands on that value (`PerceptualLoss(model="net-lin")` to `initialize(model=model)`,
    # `Stack(dim)` to `Layer(dim, num_experts=num_experts)` with `num_experts=0`: `SettingDefaults`)
    literal_defaults: tuple[tuple[str, str, object], ...] = ()
    # calls with no call site here (a library object's method, a call in a rare branch): (name called, keyword
    # passed a value that may be true, caller key, the caller's own parameter handed on there or ""),
    # so that a switch no followed call turns on is not taken for off where one of these may (SettingDefaults)
    unfollowed: tuple[tuple[str, str, str, str], ...] = ()
    # names of functions this file uses as values, not only calls (analysis/function_values.py): where those
    # values are called is not seen, so no call site says they run only behind a switch
    valued: tuple[str, ...] = ()
    # the name parts of the imports whose call sites were left with no facts, as naming no module of the project
    # the file was checked in (``StepSummarizer.tails``): a project with a module of one of these names needs it summarised again
    skipped: frozenset[str] = frozenset()
    # functions whose every run ends drained, a sync or a device read after their last device work (a timer's
    # `stop()` ending in `torch.cuda.synchronize()`: analysis/drained_ends.py); and (function key, call reference)
    # for those whose tail is a call of another file's function, drained where what that call runs is
    drained_ends: frozenset[str] = frozenset()
    drained_tails: tuple[tuple[str, Ref], ...] = ()
