"""A `DataLoader` that loads every batch in the training process (or in one worker, for heavy samples)."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.dataset_work import dataset_work, loader_dataset, several_datasets
from torchlint.analysis.impact import Cost
from torchlint.analysis.in_memory_datasets import GIVEN_ITEMS
from torchlint.analysis.names import dotted
from torchlint.analysis.loaders import UNKNOWN, is_dataloader, is_graph_loader, loader_feeds, loader_option, never_iterated, no_work_for_workers, prebatched
from torchlint.analysis.samples import WORK_PLACEHOLDER, workers_hint
from torchlint.checks.base import Check

_IN_PROCESS = "every batch is loaded and collated in the training process while the model waits"
_ONE_WORKER = "one worker process makes every batch{work}: the step waits whenever a batch takes longer to make than a step"
_ONE_WORKER_HINT = "Raise `num_workers` (about 4 per GPU to start with): one worker is one core decoding every sample of every batch"


class DataloaderNoWorkers(Check):
    """`DataLoader(...)` without `num_workers`, with `num_workers=0`, or with one worker for heavy samples."""

    code = "TL201"
    name = "dataloader-no-workers"
    cost = Cost.INPUT_PIPELINE
    message = "`{call}` has {why}, so {effect}"
    fix_hint = "Pass `num_workers` > 0 (about 4 per GPU to start with) so worker processes prepare batches ahead of the step"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if not is_dataloader(ctx, node) and not is_graph_loader(ctx, node):
            return  # (PyG's loader too: it collates each batch of graphs where it is iterated)
        arg = loader_option(ctx, node, "num_workers")
        if arg is UNKNOWN:
            return  # a splat may carry num_workers
        workers = int(arg.value.evaluated_value) if isinstance(arg, cst.Arg) and isinstance(arg.value, cst.Integer) else None
        setting = None
        if arg is None:
            why = "no `num_workers`"
        elif workers in (0, 1):
            why = f"`num_workers={workers}`"
        elif self._setting_zero(arg.value):
            # `num_workers=args.num_workers` with `default=0`: the run loads in-process unless told otherwise
            why = f"`num_workers={short_code(ctx.module, arg.value)}`, 0 by default"
        elif (setting := ctx.constants.setting_source(dotted(arg.value) or "", node)) is not None:
            # `args` passed in: its parser is in the callers' files, and the join reads its default there
            why = f"`num_workers={short_code(ctx.module, arg.value)}`, 0 by default"
        elif (setting := ctx.constants.imported_setting(dotted(arg.value) or "", node)) is not None:
            # `cfg` imported from a config module of the project: the join reads what the project assigns it
            why = f"`num_workers={short_code(ctx.module, arg.value)}`, 0 by default"
        else:
            return  # workers asked for, or a value chosen at run time
        if ctx.loops.only_first_batch(node):
            return  # built to peek at one batch: workers would only add start-up time
        if ctx.loops.never_read(node) or never_iterated(ctx, node):
            return  # bound to a name nothing reads (rebound before any loop, dead code, an unread attribute): no batch is loaded
        held = no_work_for_workers(ctx, node)
        if held is not None and held != GIVEN_ITEMS:
            return  # indices, tensors or items in memory, or batches made on the device: nothing for workers
        here, elsewhere = loader_dataset(ctx, node)
        work = dataset_work(ctx, here) if here is not None else None
        batched = prebatched(ctx, node)
        if batched and work is not None and not work.work:
            return  # whole batches sliced from what the dataset holds: one call per step, nothing for workers
        one_worker = workers == 1
        if one_worker and here is not None and (work is None or not work.heavy):
            return  # one worker keeps up with light samples (or what they cost is not known)
        if one_worker and here is None and elsewhere is None:
            return  # a library's dataset: what each sample costs is not known
        words = WORK_PLACEHOLDER if elsewhere is not None else work.words() if work is not None else ""
        call = short_code(ctx.module, node.func) + "(...)"
        loops = ctx.loops.iterations_of(node)
        dataset = (elsewhere, one_worker, batched) if elsewhere is not None else None
        if one_worker:
            self.report(node, where=loader_feeds(ctx, node), cost=Cost.ONE_WORKER_PIPELINE, related=tuple(loops), dataset=dataset,
                        hint=workers_hint(work, _ONE_WORKER_HINT), call=call, why="`num_workers=1`",
                        effect=_ONE_WORKER.format(work=words))
            return
        # Trained here, on the host only: workers would share the cores the model uses.
        on_host = ctx.devices.host_only() and any(ctx.loops.is_hot(loop) for loop in loops)
        # Whole batches from a library's dataset: what it does per batch is not seen here (often an array slice).
        unseen = batched and here is None and elsewhere is None and not several_datasets(ctx, node)
        # Items indexed in what the dataset was given: in memory (unless it reads lazily), collation left.
        given = held == GIVEN_ITEMS
        cost = Cost.HOST_INPUT_PIPELINE if on_host else Cost.PREBATCHED_PIPELINE if unseen else Cost.GIVEN_ITEMS_PIPELINE if given else None
        self.report(node, where=loader_feeds(ctx, node), cost=cost, related=tuple(loops),
                    dataset=dataset, setting=setting, hint=workers_hint(work, self.fix_hint), call=call, why=why, effect=_IN_PROCESS + words)

    def _setting_zero(self, value: cst.BaseExpression) -> bool:
        """A config field whose default in this file is 0 (``args.num_workers`` of
        ``add_argument("--num-workers", type=int, default=0)``)."""
        name = dotted(value)
        default = self.ctx.constants.setting_default(name) if name is not None else None
        return default is not None and self.ctx.constants.int_value(default, default) == 0
