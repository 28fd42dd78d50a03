"""The rule catalogue: every rule's metadata, and its hand-written page in rules/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchlint.findings import ENGINE_CODES, SYNTAX_ERROR, UNUSED_NOQA, FixSafety

FAMILY_TITLES = {
    "TL0": "the engine's own: parse problems and suppression comments",
    "TL1": "host/device synchronization and transfers",
    "TL2": "data loading and tensor creation",
    "TL3": "autograd and memory",
    "TL4": "model architecture",
    "TL5": "precision and compilation",
    "TL6": "multi-GPU and distributed",
    "TLR": "runtime (reported by `torchlint profile`)",
}

# Every check's metadata, written out so that `torchlint rules`, `rule` and a warm-cache
# run never import the checks (and libcst, about 0.4 s). tests/test_startup.py fails,
# printing the new rows, whenever this drifts from the checks themselves (`from_checks`).
_TABLE = (
    ('TL101', 'scalar-sync-in-loop', True, 'NONE', '`.item()`/`.tolist()` on a tensor inside a hot loop; a tensor test or a value-sized tensor repeated within a step, or a decode loop\'s stop check.'),
    ('TL102', 'device-to-host-in-loop', True, 'NONE', '`.cpu()`/`.numpy(force=True)`/`.to("cpu")` on a device value inside a hot loop.'),
    ('TL103', 'sync-call-in-loop', True, 'NONE', '`torch.cuda.synchronize()`/`torch.cuda.empty_cache()` unconditionally inside a hot loop.'),
    ('TL104', 'tensor-condition-in-loop', False, 'NONE', '`if`/`while`/`assert` whose test reads a tensor value (also through `all()`/`any()`), inside a hot loop.'),
    ('TL105', 'tensor-to-python-in-loop', True, 'NONE', '`int(t)`, `float(t)`, `min(x, t)`, `range(t)`, `math.f(t)`, `items[t]`, `x[a:t]`, a size `torch.arange(t)` or `f"{t:.4f}"` on a device tensor inside a hot loop.'),
    ('TL106', 'data-dependent-shape-in-loop', False, 'NONE', '`x[mask]`, `nonzero()`, `unique()`, `masked_select()`, `bincount()`, `repeat_interleave(t)` on device tensors inside a hot loop.'),
    ('TL107', 'distribution-validation-in-loop', True, 'NONE', '`Categorical(probs)`, `Normal(mu, std)`... built inside a hot loop without `validate_args=False`.'),
    ('TL110', 'create-then-move', True, 'SAFE', 'A tensor factory whose result is moved with `.cuda()`/`.to(device)` right away.'),
    ('TL111', 'blocking-host-to-device', False, 'SAFE', '`.to(device)`/`.cuda()` of a DataLoader batch without `non_blocking=True`.'),
    ('TL112', 'device-round-trip', True, 'NONE', '`.cpu().cuda()`, `.cuda().cpu()`, `torch.from_numpy(x.numpy()).cuda()`: a move undone at once, or in the same pass after host work.'),
    ('TL113', 'constant-upload-in-loop', True, 'NONE', '`torch.from_numpy(CONST).to(device)`, `torch.tensor(self.weights, device=d)`: a constant uploaded inside a hot loop.'),
    ('TL114', 'host-index-in-loop', True, 'NONE', '`x[idx]` on a device tensor where `idx` is a host tensor, a NumPy array or a list, inside a hot loop.'),
    ('TL115', 'timestep-recurrence-on-device', True, 'NONE', '`for t in reversed(range(n)): advantages[t] = last = delta + g * l * last`: a few tiny kernels per timestep.'),
    ('TL116', 'per-element-update-loop', True, 'NONE', '`for n in occurrence: out[n] -= penalty(n)`, or `t[i].index_add_(...)` per batch row: a kernel or two per element, where one indexed op would do.'),
    ('TL201', 'dataloader-no-workers', True, 'NONE', '`DataLoader(...)` without `num_workers`, with `num_workers=0`, or with one worker for heavy samples.'),
    ('TL202', 'dataloader-no-pin-memory', True, 'NONE', '`DataLoader(...)` without `pin_memory=True` in a module that uses an accelerator.'),
    ('TL203', 'tensor-copies-numpy', True, 'UNSAFE', '`torch.tensor(a)` / `torch.Tensor(a)` / `torch.FloatTensor(a)` on a NumPy array.'),
    ('TL204', 'legacy-tensor-constructor', True, 'UNSAFE', '`torch.FloatTensor(...)`, `torch.cuda.LongTensor`, `torch.Tensor([...])` or `Variable(...)`.'),
    ('TL205', 'pad-to-max-length', True, 'NONE', '`tokenizer(..., padding="max_length")`, or `ids + [pad] * (max_len - len(ids))`, in training data preparation: every sequence padded to the maximum length.'),
    ('TL301', 'eval-without-no-grad', True, 'NONE', 'A model called after `.eval()` without `no_grad`/`inference_mode`.'),
    ('TL302', 'loss-graph-retained', True, 'NONE', 'A loss tensor (with its graph) appended to or summed into a value that outlives the step.'),
    ('TL303', 'zero-grad-memset', True, 'SAFE', '`zero_grad(set_to_none=False)` or a manual `p.grad.zero_()`: a memset per parameter every step.'),
    ('TL304', 'inference-use-inference-mode', False, 'NONE', '`with torch.no_grad():` around pure inference: `torch.inference_mode()` skips more bookkeeping.'),
    ('TL305', 'ema-python-loop', True, 'NONE', '`for e, p in zip(ema.parameters(), model.parameters()): e.mul_(d).add_(...)`: an EMA per parameter.'),
    ('TL306', 'anomaly-detection-on', True, 'NONE', '`torch.autograd.set_detect_anomaly(True)` or `detect_anomaly()` on a training run\'s path.'),
    ('TL307', 'debug-tool-in-training', True, 'NONE', '`torch.autograd.profiler.profile()`/`emit_nvtx()` around training, or `gradcheck` in a training loop.'),
    ('TL308', 'frozen-module-requires-grad', True, 'NONE', 'A module in the loss that no optimizer is given, whose parameters still require grad.'),
    ('TL309', 'detach-instead-of-no-grad', True, 'NONE', 'A module call whose output is detached at once, or only read on the host, outside `no_grad`.'),
    ('TL310', 'discarded-weight-grads', True, 'NONE', 'A module whose gradients a backward computes for a step that does not update it.'),
    ('TL311', 'grad-norm-python-loop', True, 'NONE', '`for p in model.parameters(): total += p.grad.norm() ** 2`: a gradient norm, a few kernels per parameter.'),
    ('TL312', 'checkpoint-every-step', True, 'NONE', '`torch.save(model.state_dict(), path)` (or a library\'s checkpoint save) on every training step.'),
    ('TL313', 'grad-update-python-loop', True, 'NONE', '`for p in model.parameters(): p.grad *= s`: each gradient rescaled or cleaned by its own kernel.'),
    ('TL401', 'conv-bias-before-batchnorm', True, 'UNSAFE', 'Conv layer with `bias=True` (the default) feeding straight into BatchNorm.'),
    ('TL402', 'tensor-core-misaligned', True, 'NONE', 'Sizes (features, channels, hidden, batch) that are not multiples of 8.'),
    ('TL403', 'cudnn-benchmark-off', False, 'NONE', 'Conv layers trained on the GPU without `torch.backends.cudnn.benchmark = True`.'),
    ('TL404', 'channels-last-missing', False, 'NONE', 'Conv2d model trained under autocast without `memory_format=torch.channels_last`.'),
    ('TL405', 'hand-written-attention', True, 'NONE', "`softmax(q @ k.transpose(-2, -1) * scale) @ v` (or its spellings) inside a model's step."),
    ('TL406', 'deterministic-algorithms-on', True, 'NONE', '`torch.backends.cudnn.deterministic = True` or `torch.use_deterministic_algorithms(True)` for training.'),
    ('TL407', 'decode-without-kv-cache', True, 'NONE', 'A decode loop whose model call is given the whole sequence it grows, with no KV cache: every token re-runs the prefix.'),
    ('TL408', 'kv-cache-out-of-place', True, 'NONE', '`k = cache_k.index_copy(dim, pos, k)` or `k = torch.cat((past_key, k), -2)` in a decode step: the whole key-value cache copied to write one token.'),
    ('TL409', 'unbatched-guidance', True, 'NONE', '`eps_c = model(x, t, c); eps_u = model(x, t, uc)` in a sampling step: two model calls where one on `torch.cat([x, x])` would do.'),
    ('TL410', 'decode-past-end', True, 'NONE', 'A decode loop with no exit once every sequence has emitted EOS, whose output is cut at EOS afterwards: every generation pays the full length.'),
    ('TL501', 'no-mixed-precision', False, 'NONE', 'Training loop (`.backward()` + `optimizer.step()`) with no autocast in the module.'),
    ('TL502', 'deprecated-amp-api', True, 'SAFE', 'apex AMP, `torch.cuda.amp.autocast(...)` or `torch.cuda.amp.GradScaler(...)`.'),
    ('TL503', 'jit-script-fusion', False, 'NONE', '`@torch.jit.script` used to fuse a pointwise function; `torch.compile` does it now.'),
    ('TL504', 'compiled-graph-break', True, 'NONE', '`.item()`, `.tolist()`, `int(t)`, `print()`, logging, `if t:`, `nonzero()` or `x[mask]` in a function torch.compile traces.'),
    ('TL505', 'optimizer-not-fused', False, 'NONE', '`torch.optim.Adam/AdamW(...)` in a module that trains on an accelerator, without `fused=True`.'),
    ('TL506', 'fp32-matmul-precision', False, 'NONE', 'Training loop on an accelerator, in float32, with no `torch.set_float32_matmul_precision(...)`.'),
    ('TL601', 'data-parallel', True, 'NONE', '`nn.DataParallel(...)` / `nn.parallel.data_parallel(...)`: single-process multi-GPU.'),
    ('TL602', 'ddp-without-distributed-sampler', True, 'NONE', '`DataLoader(shuffle=True)` with no sampler in a module that wraps a model in DDP.'),
    ('TL603', 'ddp-accumulation-without-no-sync', True, 'NONE', '`loss.backward()` every micro-step and `optimizer.step()` every N under DDP, with no `no_sync()`.'),
    ('TL604', 'ddp-find-unused-parameters', True, 'NONE', '`DistributedDataParallel(model, find_unused_parameters=True)`: a graph walk every step.'),
    ('TL605', 'gloo-backend-on-cuda', True, 'NONE', '`init_process_group("gloo")` in a module that puts its model or data on CUDA.'),
    ('TL606', 'collective-per-parameter', True, 'NONE', '`for p in model.parameters(): dist.all_reduce(p.grad)`: one collective per parameter tensor.'),
)


# The runtime findings of `torchlint profile` (correlate/runtime.py): no source pattern, so
# `check` never runs them. tests/test_catalogue.py fails when this drifts from
# correlate.runtime.RUNTIME_RULES.
_RUNTIME_TABLE = (
    ('TLR01', 'dataloader-wait-share', 'The training loop waited on a DataLoader for 5 % or more of its time.'),
    ('TLR02', 'host-device-syncs', 'One or more host-device synchronisations per step (CUDA sync debug).'),
    ('TLR03', 'pageable-copies', 'Host-to-device copies from pageable (unpinned) memory.'),
    ('TLR04', 'gpu-idle-share', 'The GPU was idle half or more of the torch.profiler window.'),
    ('TLR05', 'optimizer-single-tensor', 'An optimizer `step()` ran the per-parameter for-loop where `foreach`/`fused` exist.'),
    ('TLR06', 'fill-then-move', 'A host tensor made by a factory or filled in place, then copied to the device.'),
    ('TLR07', 'low-precision-matmul-misaligned', 'fp16/bf16 matmuls whose M, N or K is not a multiple of 8.'),
    ('TLR08', 'fp32-matmul-without-tf32', 'fp32 matmuls on an Ampere-or-newer GPU with TF32 off.'),
    ('TLR09', 'host-allocator-churn', "glibc's malloc gave memory back and faulted it in again: 5 % or more of the run."),
    # multi-rank runs (`profile --nproc-per-node`, correlate/ranks.py)
    ('TLR10', 'collective-wait', 'A rank had a collective in flight for 10 % or more of its step time.'),
    ('TLR11', 'straggler-rank', 'One rank works longer per step than the others, which wait for it.'),
    ('TLR12', 'dataloader-wait-per-rank', 'The ranks wait on their DataLoaders unequally.'),
    ('TLR13', 'ranks-same-samples', 'Every rank iterates the whole dataset (TL602 confirmed by the run).'),
    # torch.compile (correlate/compiled.py)
    ('TLR14', 'compile-graph-break', 'torch.compile left its graph at this line (a graph break) while the run compiled it.'),
    ('TLR15', 'compile-recompilation', 'A compiled function was compiled again because a guard failed (a shape, a Python number ...).'),
    ('TLR16', 'ddp-accumulation-sync', 'DDP all-reduced the gradients in more than one backward pass per optimizer step (no `no_sync()`).'),
    # autograd's debugging modes (correlate/patterns.py)
    ('TLR17', 'anomaly-mode-enabled', "Backward passes ran with autograd's anomaly detection on."),
)


@dataclass(frozen=True, slots=True)
class Rule:
    code: str
    name: str
    summary: str
    default: bool
    fix: FixSafety
    runtime: bool = False  # a runtime finding of `torchlint profile`, not a static check

    @property
    def family(self) -> str:
        return self.code[:3]


def _engine_rules() -> list[Rule]:
    """The rules the engine reports itself: TL000 (a file it cannot read) and TL001 (a
    `# noqa` code that suppresses nothing, opt-in as ruff's RUF100 is)."""
    return [
        Rule(SYNTAX_ERROR[0], SYNTAX_ERROR[1], "A file that cannot be read or parsed", True, FixSafety.NONE),
        Rule(UNUSED_NOQA[0], UNUSED_NOQA[1], "A `# noqa` code that suppresses nothing: unused, unknown or not selected", False, FixSafety.SAFE),
    ]


def rules() -> list[Rule]:
    """Every rule, TL000 and TL001 first, sorted by code (from the table: no check is imported)."""
    return _engine_rules() + [Rule(code, name, summary, default, FixSafety[fix]) for code, name, default, fix, summary in _TABLE]


def runtime_rules() -> list[Rule]:
    """The runtime findings (``TLR..``) of `torchlint profile`, sorted by code."""
    return [Rule(code, name, summary, True, FixSafety.NONE, runtime=True) for code, name, summary in _RUNTIME_TABLE]


def all_rules() -> list[Rule]:
    """Static rules, then runtime ones: the whole catalogue (`torchlint rules`)."""
    return rules() + runtime_rules()


def runtime_codes() -> frozenset[str]:
    return frozenset(code for code, _, _ in _RUNTIME_TABLE)


def from_checks() -> list[Rule]:
    """Every rule as the checks themselves describe it (what ``_TABLE`` must equal)."""
    from torchlint.checks import all_checks

    found = _engine_rules()
    for check in all_checks():
        found.append(Rule(check.code, check.name, check.summary(), check.default, check.fix_safety))
    return found


def table_rows(table: list[Rule]) -> str:
    """``_TABLE``'s source for ``table`` (printed by the test when the table is stale)."""
    return "\n".join(f"    {(r.code, r.name, r.default, r.fix.name, r.summary)!r}," for r in table if r.code not in ENGINE_CODES)


def defaults() -> dict[str, bool]:
    """Every code mapped to whether it runs without configuration."""
    return {rule.code: rule.default for rule in rules()}


def find(code_or_name: str, runtime: bool = False) -> Rule | None:
    """The static rule with that code or name; with ``runtime``, runtime rules too."""
    wanted = code_or_name.strip()
    for rule in all_rules() if runtime else rules():
        if rule.code == wanted.upper() or rule.name == wanted.lower():
            return rule
    return None


def _pages_dir() -> Path | None:
    from importlib import resources  # only to find a page: it imports tempfile and zipfile's kin

    packaged = resources.files("torchlint") / "_rules"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "rules"
    return checkout if checkout.is_dir() else None


def page_path(rule: Rule) -> Path | None:
    directory = _pages_dir()
    if directory is None:
        return None
    candidate = directory / f"{rule.code}-{rule.name}.md"
    return candidate if candidate.is_file() else None


def page(rule: Rule) -> str | None:
    """The rule's Markdown page from the installed wheel or the checkout."""
    path = page_path(rule)
    return path.read_text(encoding="utf-8") if path is not None else None
