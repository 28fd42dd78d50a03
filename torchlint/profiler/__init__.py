"""The runtime half of torchlint: ``torchlint profile``.

Collect (a child process runs the script under cProfile, call probes, a line
sampler and a scheduled torch.profiler window; :mod:`.bootstrap`) → session
(plain data on disk; :mod:`.session`, read back by :mod:`.loadrun`) → correlate (:mod:`torchlint.correlate`)
→ render (:mod:`torchlint.report.profile_text`, :mod:`torchlint.report.profile_json`).

Importing this package imports neither torch nor libcst.
"""

from __future__ import annotations

from torchlint.profiler.loadrun import load_run
from torchlint.profiler.session import Hotspot, ProfileSession

__all__ = ["Hotspot", "ProfileSession", "load_run"]
