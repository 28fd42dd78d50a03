"""``torchlint profile --experiment``: measured savings (docs/profiling.md, "Experiments").

The parent side: plan (which findings can be switched off, and how), variants
(private source copies), the window server client, the alternation and the
statistics. The child side lives in ``torchlint.profiler.measure`` and
``torchlint.profiler.switches`` (the only places that import torch).
"""
