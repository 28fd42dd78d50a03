"""Denoising loops: a diffusion sampler's loop, one denoiser call per time step, its output the next step's input."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.decoding import assignment_of, carried_inputs, derived, grown_in_place, may_run_a_model, mentions, targets
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# What a denoiser, or a method given one, is called: `model(x, t)`, `self.p_sample(model, ...)`.
_DENOISER_WORDS = ("model", "net", "denois", "diffus", "sample", "predict")
# A loop variable so named is a model: a loop handing each to the sampler goes over stages, not time steps.
_MODEL_WORDS = ("model", "net", "denois", "stage")
# A loop variable so named is a batch (`for i, sample in enumerate(loader)`), not a time step.
_DATA_WORDS = ("batch", "sample", "data", "input", "image", "img")
# A function of these names samples: a loop walking a schedule (`sigmas[i]`) there is its steps.
_SAMPLING_FUNCTIONS = ("sampl", "denois", "diffus", "generat", "reverse")


def denoises(ctx: FileContext, loop: cst.CSTNode) -> bool:
    """Is ``loop`` a denoising loop: each iteration calls a denoiser (``model(x, t)``, or a
    method given a model: ``self.p_sample(model, img, t)``) with the state and the
    iteration's time step, and the state is made again from its result? Not in a
    ``forward``, and not a loop over layers (``x = layer(x, i)``); a loop walking a sequence
    (``h = cell(xs[t], h, t)``: an RNN) only in a function named for sampling."""
    if type(loop) is not cst.For:
        return False
    function = ctx.tree.enclosing_function(loop)
    name = function.name.value.lower() if function is not None else ""
    if name in ("forward", "__call__"):
        return False  # a loop over time steps there runs within the model's step
    sampling = any(part.startswith(_SAMPLING_FUNCTIONS) for part in name.split("_"))  # `p_sample_loop`, not `reshape_subsample`
    steps = {step for step in mentions(loop.target) if not any(word in step.lower() for word in _DATA_WORDS)}
    nodes = list(ctx.loops.own_nodes(loop.body))
    if sampling and not any(type(n) is cst.Call and may_run_a_model(ctx, n) for n in nodes):
        # `for sigma, ... in schedule: for r in range(resample_times): images = step(images, sigma)`:
        # the time step's work sits in an inner loop that repeats it
        nodes = list(ctx.loops.own_nodes(loop.body, enter=lambda node: type(node) in (cst.For, cst.While)))
    if not sampling and any(type(n) is cst.Subscript and any(mentions(e) & steps for e in n.slice) for n in nodes):  # type: ignore[attr-defined]
        return False  # `xs[t]`: it walks a sequence, one element per iteration
    if any(type(n) is cst.Call and ctx.method_name(n) in ("backward", "step") and ctx.loops.is_step_call(n) for n in nodes):
        return False  # a training step (`output, hidden = model(data, hidden)`, then backward): the state is the weights
    ordered = sorted((n for n in nodes if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)), key=ctx.tree.index)
    runs = [(call, statement) for call in nodes if type(call) is cst.Call and may_run_a_model(ctx, call)
            and (statement := assignment_of(ctx, call)) is not None]
    made = derived(ordered, set().union(*(targets(statement) for _, statement in runs)))
    steps = _timesteps(ctx, ordered, steps, made, slices=sampling)
    # (what an inner `for` writes back element by element counts too: SV4D's `for i, t in enumerate(frame_indices):
    # ... latent_matrix[t, v] = samples[i, j]`, the state the next step slices)
    grown = grown_in_place(list(ctx.loops.own_nodes(loop.body, enter=lambda node: type(node) is cst.For)))
    # The state is rebound whole (`img = out["sample"]`); `lprobs[i] = f(lprobs[i])` updates one item per iteration.
    rebound = {name for statement in ordered if type(statement) is not cst.AugAssign
               for name in targets(statement, items=False)}
    models = {name for name in mentions(loop.target) if any(word in name.lower() for word in _MODEL_WORDS)}
    if any(mentions(arg.value) & models for call, _ in runs for arg in call.args):
        return False  # `img = self.one_unet_sample(unet, ...)` for each unet of a cascade: a stage per iteration
    if any(type(call.func) is cst.Name and call.func.value in mentions(loop.target) for call, _ in runs):
        # the loop's variable is the model it runs (`for amateur, cache in zip(amateurs, caches): out = amateur(x,
        # cache=cache)`: contrastive decoding's amateurs, an ensemble): one model per iteration, not a time step
        return False
    for call, statement in runs:
        if mentions(call.func) & steps:
            continue  # `x = layer(x, i)` for each layer: one layer per iteration, not a step
        if not any(mentions(arg.value, sampling) & steps for arg in call.args):
            continue  # the iteration's time step conditions the denoiser
        called = [dotted(call.func) or "", *(dotted(arg.value) or "" for arg in call.args)]
        if not sampling and not any(word in part.lower() for part in called for word in _DENOISER_WORDS):
            continue
        fed = derived(ordered, targets(statement)) & rebound
        inputs = carried_inputs(call, [s for s in ordered if s is not statement], ctx) - steps  # `img = f(img, t)`: its own target is fed
        # (the loop's own variables are new each iteration, its data too: Swin's `for idx, (samples, targets) in
        # enumerate(data_loader): samples, targets = mixup_fn(samples, targets)` carries nothing over)
        inputs -= mentions(loop.target)
        # (and what they hold: audiocraft's `for info in infos: info.description = paraphraser.sample_paraphrase(
        # info.meta.path, info.description)` rewrites each item's own field, no state carried to the next)
        inputs = {name for name in inputs if name.split(".", 1)[0].split("[", 1)[0] not in mentions(loop.target)}
        if inputs & fed or any(grown_name in inputs and mentions(value) & fed for grown_name, value in grown):
            return True
    return False


def _timesteps(ctx: FileContext, ordered: list[cst.CSTNode], steps: set[str], made: set[str], slices: bool) -> set[str]:
    """The loop's variables and what the body makes of them without a model or what one
    ``made`` (``t = th.tensor([i] * n)``, ``time_cond = torch.full((b,), time)``; not
    ``images_hat = images + sigma_hat * eps``: the state), outside an index unless ``slices``
    (``x_t = xs[:, t]`` is an element of a sequence; ``sigma = sigmas[i]`` in a sampler is
    its schedule's)."""
    found = set(steps)
    for statement in ordered:
        value = statement.value  # type: ignore[attr-defined]
        if type(statement) is cst.AugAssign or not mentions(value, slices) & found or mentions(value) & made:
            continue
        if any(type(n) is cst.Call and may_run_a_model(ctx, n) for n in (value, *ctx.tree.descendants(value))):
            continue  # `out = self.p_sample(model, img, t)`: what the model made is the state, not the time
        found |= targets(statement)
    return found
