"""Framework entry points that run once per step: the one table to extend.

A framework owns the loop, so the step is a method it calls (Lightning's
``training_step``) or a function registered with it (ignite's ``Engine(fn)``).
Per-epoch hooks (``on_train_epoch_end``) are deliberately absent: they run once
per epoch, not per step.
"""

from __future__ import annotations

from dataclasses import dataclass

TRAINING, EVALUATION, PREDICTION = "training", "evaluation", "prediction"


@dataclass(frozen=True, slots=True)
class BaseHooks:
    """Per-step methods of subclasses of a framework base class."""

    framework: str  # shown in messages: "Lightning"
    roots: tuple[str, ...]  # top-level packages the base class comes from
    classes: tuple[str, ...]  # base class names (last component of the qualified name)
    methods: dict[str, str]  # method name -> phase


_LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")
_LIGHTNING_BATCH_HOOKS = {
    "on_train_batch_start": TRAINING,
    "on_train_batch_end": TRAINING,
    "on_before_backward": TRAINING,
    "on_after_backward": TRAINING,
    "on_before_optimizer_step": TRAINING,
    "on_before_zero_grad": TRAINING,
    "on_validation_batch_start": EVALUATION,
    "on_validation_batch_end": EVALUATION,
    "on_test_batch_start": EVALUATION,
    "on_test_batch_end": EVALUATION,
    "on_predict_batch_start": PREDICTION,
    "on_predict_batch_end": PREDICTION,
}

BASE_HOOKS: tuple[BaseHooks, ...] = (
    BaseHooks(
        "Lightning",
        _LIGHTNING_ROOTS,
        ("LightningModule",),
        {
            "training_step": TRAINING,
            "validation_step": EVALUATION,
            "test_step": EVALUATION,
            "predict_step": PREDICTION,
            "optimizer_step": TRAINING,
            **_LIGHTNING_BATCH_HOOKS,
        },
    ),
    BaseHooks("Lightning", _LIGHTNING_ROOTS, ("Callback",), dict(_LIGHTNING_BATCH_HOOKS)),
    BaseHooks(
        "Hugging Face",
        ("transformers", "trl"),
        ("Trainer", "Seq2SeqTrainer", "SFTTrainer", "DPOTrainer", "RewardTrainer"),
        {"compute_loss": TRAINING, "training_step": TRAINING, "_prepare_inputs": TRAINING, "prediction_step": EVALUATION},
    ),
    BaseHooks(  # coqui-ai/Trainer (TTS and its kin): the trainer calls these once per batch
        "Coqui Trainer",
        ("trainer",),
        ("TrainerModel",),
        {"train_step": TRAINING, "optimize": TRAINING, "eval_step": EVALUATION},
    ),
    BaseHooks(
        "Hugging Face",
        ("transformers",),
        ("TrainerCallback",),
        {"on_step_begin": TRAINING, "on_step_end": TRAINING, "on_substep_end": TRAINING},
    ),
)

#: Calls that register their first argument as the step function: ignite's ``Engine(fn)``.
STEP_REGISTRATIONS: dict[str, str] = {
    "ignite.engine.Engine": "the step function of an ignite `Engine`",
    "ignite.engine.engine.Engine": "the step function of an ignite `Engine`",
    "ignite.engine.DeterministicEngine": "the step function of an ignite `Engine`",
}

#: ignite events that fire on every iteration (``Events.ITERATION_COMPLETED(every=N)`` does not).
PER_STEP_EVENTS = frozenset({"ITERATION_STARTED", "ITERATION_COMPLETED", "GET_BATCH_STARTED", "GET_BATCH_COMPLETED"})


#: Hooks a framework calls after the batch's optimizer step (nothing of the step follows them,
#: only the next batch's launches: a read there waits once, at the step's end) and hooks it calls
#: before the step's work (nothing of the step queued before them). The others (`training_step`,
#: the backward and optimizer hooks) run mid-step: the backward and the optimizer step follow.
BATCH_END_HOOKS = frozenset({
    "on_train_batch_end", "on_validation_batch_end", "on_test_batch_end", "on_predict_batch_end", "on_step_end",
})
BATCH_START_HOOKS = frozenset({
    "on_train_batch_start", "on_validation_batch_start", "on_test_batch_start", "on_predict_batch_start", "on_step_begin",
})

#: Every method name some framework calls per step (their calls are located for `related`).
HOOK_METHOD_NAMES = frozenset(name for hooks in BASE_HOOKS for name in hooks.methods)


def base_hooks(qualified: str) -> BaseHooks | None:
    """The hook table of the framework base class named ``qualified``, if it is one."""
    root, _, rest = qualified.partition(".")
    last = qualified.rsplit(".", 1)[-1]
    for hooks in BASE_HOOKS:
        if root in hooks.roots and rest and last in hooks.classes:
            return hooks
    return None


def module_base(qualified: str) -> bool:
    """Does subclassing the library class ``qualified`` make a class an ``nn.Module``
    (``torch.nn.Module``, a container or layer of ``torch.nn``, ``torch.jit.ScriptModule``, a
    Lightning module, a Hugging Face ``PreTrainedModel``: an ``nn.Module`` with loading and generation)?"""
    return qualified in ("torch.nn.Module", "torch.nn.Sequential", "torch.nn.ModuleList", "torch.jit.ScriptModule") \
        or qualified.startswith("torch.nn.") and qualified.rsplit(".", 1)[-1][:1].isupper() \
        or qualified.startswith(("pytorch_lightning.", "lightning.")) \
        or qualified.startswith("transformers.") and qualified.rsplit(".", 1)[-1] == "PreTrainedModel"  # (not `TFPreTrainedModel`, `FlaxPreTrainedModel`)


def phase_text(framework: str, method: str) -> str:
    return f"{framework} `{method}`"
