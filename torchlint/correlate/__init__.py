"""Join static findings with what a profiled run measured. Pure: no torch, no libcst.

The rules (docs/profiling.md, "Join rules"):

1. Both sides are compared as absolute, normalised paths: a finding's path is
   resolved against the run's cwd, a measurement's path is the code object's.
2. **Line match.** Probe measurements (timed calls of ``Tensor.item``,
   ``DataLoader.__next__`` ...) and the torch.profiler ops recorded inside them
   are charged to their innermost user frame. A finding matches them when that
   line falls in ``[line, end_line]`` and the probed call is one the rule is
   about (:data:`RULE_PROBES`), so unrelated work on the same line does not
   confirm it; on a one-line finding the call's columns must overlap too, so
   two calls on one line are told apart.
3. **Related places.** A finding whose cost shows up elsewhere (``Finding.related``:
   the ``for`` statements iterating a flagged ``DataLoader``) also takes the
   measurements at those lines (TL201: the batch fetch time). TL202 (no
   ``pin_memory``) takes the pageable host-to-device copies in those loops'
   bodies, the cost pinned memory changes; the fetch time is its context.
4. **Rules with no probed call** (eval without ``no_grad``, ...) take the line
   sampler's wall time with that line on the stack.
5. **Function context.** cProfile is function-level: the enclosing function
   (found with ``ast``; pstats keys a decorated function by its first decorator
   line, so both that and the ``def`` line match) is shown as context, never
   as the finding's cost.

The time observed at a finding's lines (``observed_s``) is context, not a
saving: findings are ranked by a measured saving (an experiment's
``Measurement``), then by an expected one (``Estimate``, from the per-rule
models in torchlint/estimate/, passed in as ``estimator``), with
:func:`torchlint.savings.rank_key`. The rest stay in the report unranked.
Sampled lines that no finding explains, and the run's one-time costs, are
listed as hotspots; runtime-only findings (``TLR01``...) are derived from the
run as a whole.
"""

from torchlint.correlate.join import correlate, user_files
from torchlint.correlate.model import (
    RULE_PROBES,
    Correlated,
    Correlation,
    Evidence,
    FunctionCost,
    UnexplainedHotspot,
    display_path,
    enclosing_function,
    fmt_interval,
    fmt_seconds,
    source_line,
)
from torchlint.correlate.runtime import RUNTIME_RULES, loader_at

__all__ = [
    "Correlated",
    "Correlation",
    "Evidence",
    "FunctionCost",
    "RULE_PROBES",
    "RUNTIME_RULES",
    "UnexplainedHotspot",
    "correlate",
    "display_path",
    "enclosing_function",
    "fmt_interval",
    "fmt_seconds",
    "loader_at",
    "source_line",
    "user_files",
]
