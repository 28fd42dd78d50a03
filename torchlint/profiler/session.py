"""The data a profiled run leaves behind, as plain serialisable values.

A :class:`ProfileSession` is what ``torchlint profile`` measured: facts about the
run (``meta``), what each profiler covered (``coverage``) and line- or
function-level :class:`Hotspot` records. The child process writes
``session.json``; cProfile's ``profile.prof`` is read back into function-level
hotspots when the session is loaded. Correlation and rendering work on a
loaded session only, so a report can be rebuilt without re-running the job.

Nothing here imports torch or libcst.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SESSION_SCHEMA_VERSION = 1
SESSION_FILE = "session.json"
PROFILE_FILE = "profile.prof"
EXPERIMENT_FILE = "experiment.json"  # written by ``--experiment`` (torchlint/experiment)

#: Where a hotspot was measured.
SOURCES = ("probe", "sampler", "torch", "cprofile", "sync")


@dataclass(frozen=True, slots=True)
class Hotspot:
    """Measured cost at one place in user code.

    ``source`` says which instrument measured it:

    - ``probe``: a timed call of a torch API (``Tensor.item``, ``DataLoader.__next__`` ...)
      at its innermost user frame, over the whole run;
    - ``sampler``: wall-clock stack samples of the main thread, over the whole run
      (``self_s``: the line was the innermost user frame; ``total_s``: it was anywhere
      on the stack);
    - ``torch``: torch.profiler ops recorded inside a probed call during the
      torch.profiler window (``op`` is the aten op or CUDA runtime call);
    - ``cprofile``: a cProfile function entry (``line`` is pstats' first line);
    - ``sync``: CUDA synchronisations reported by ``torch.cuda.set_sync_debug_mode``.
    """

    source: str
    path: str
    line: int
    granularity: str  # "line" | "function"
    function: str
    op: str | None
    self_s: float
    total_s: float
    calls: int
    #: probe: copy direction of a transfer ("DtoH", "HtoD pageable", "HtoD pinned", "DtoD");
    #: torch: the probed call (``Tensor.item`` ...) whose range the op ran inside.
    kind: str | None = None
    device_s: float = 0.0  # device (GPU) time of torch ops, torch source only
    samples: int = 0  # sampler source only
    dataloader_s: float = 0.0  # sampler: part of total_s spent inside a DataLoader fetch
    #: sampler: part of self_s after the first optimizer step (the steps the step times
    #: measure, without the start-up before them); None in a session from before it was kept
    step_self_s: float | None = None
    #: probe: 1-based column span of the call expression on ``line`` (co_positions),
    #: so that two findings on one line share its calls; None when unknown
    column: int | None = None
    end_column: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hotspot:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(slots=True)
class ProfileSession:
    """Everything measured in one run; see docs/profiling.md."""

    meta: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, Any] = field(default_factory=dict)
    hotspots: list[Hotspot] = field(default_factory=list)
    steps: dict[str, Any] = field(default_factory=dict)
    dataloader: dict[str, Any] = field(default_factory=dict)
    torch_window: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    schema_version: int = SESSION_SCHEMA_VERSION

    # -- convenience views -------------------------------------------------

    @property
    def cwd(self) -> str:
        return str(self.meta.get("cwd") or os.getcwd())

    @property
    def wall_s(self) -> float:
        """Wall time of the script itself (first line to exit)."""
        return float(self.meta.get("script_wall_s") or 0.0)

    @property
    def script_s(self) -> float:
        """The script's own time: its wall time less torchlint's work inside it (the
        trace export at the end of a torch.profiler window). Shares divide by this."""
        wall = self.wall_s
        tool = float(self.meta.get("tool_s") or 0.0)
        return wall - tool if 0 < tool < wall else wall

    def by_source(self, source: str) -> list[Hotspot]:
        return [h for h in self.hotspots if h.source == source]

    def resolve(self, path: str) -> str:
        """An absolute, normalised path; relative paths are taken from the run's cwd."""
        return resolve_path(path, self.cwd)

    # -- (de)serialisation -------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "meta": self.meta,
            "coverage": self.coverage,
            "steps": self.steps,
            "dataloader": self.dataloader,
            "torch_window": self.torch_window,
            "artifacts": self.artifacts,
            "hotspots": [h.to_dict() for h in self.hotspots],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileSession:
        version = int(data.get("schema_version", 0))
        if version > SESSION_SCHEMA_VERSION:
            raise ValueError(
                f"session schema version {version} is newer than this torchlint "
                f"understands ({SESSION_SCHEMA_VERSION})"
            )
        return cls(
            meta=dict(data.get("meta") or {}),
            coverage=dict(data.get("coverage") or {}),
            hotspots=[Hotspot.from_dict(h) for h in data.get("hotspots") or []],
            steps=dict(data.get("steps") or {}),
            dataloader=dict(data.get("dataloader") or {}),
            torch_window=dict(data.get("torch_window") or {}),
            artifacts=dict(data.get("artifacts") or {}),
            schema_version=version or SESSION_SCHEMA_VERSION,
        )

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=False), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> ProfileSession:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def resolve_path(path: str, cwd: str) -> str:
    """``path`` made absolute against ``cwd`` and normalised (symlinks resolved)."""
    if path.startswith("<"):
        return path
    p = path if os.path.isabs(path) else os.path.join(cwd, path)
    return os.path.realpath(p)


def load_measurements(run_dir: Path) -> tuple[list[Any], str | None]:
    """The experiment's measurements in a run directory (``experiment.json``), and a
    warning when the file is there but unreadable. No file: no measurements."""
    from torchlint.savings import Measurement

    path = Path(run_dir) / EXPERIMENT_FILE
    if not path.is_file():
        return [], None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [Measurement.from_dict(m) for m in data.get("measurements") or []], None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return [], f"could not read {EXPERIMENT_FILE}: {type(exc).__name__}: {exc}"
