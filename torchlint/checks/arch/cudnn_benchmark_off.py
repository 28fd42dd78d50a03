"""A CNN training script that never turns on cuDNN autotuning."""

from __future__ import annotations


from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.checks.base import Check

_CONVS = {f"torch.nn.{kind}{d}d" for kind in ("Conv", "ConvTranspose") for d in (1, 2, 3)}
_CUDNN_FLAGS = ("torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic")


class CudnnBenchmarkOff(Check):
    """Conv layers trained on the GPU without `torch.backends.cudnn.benchmark = True`."""

    code = "TL403"
    name = "cudnn-benchmark-off"
    cost = Cost.MISSING_PIECES
    message = "This training loop runs convolutions without `torch.backends.cudnn.benchmark = True`, so cuDNN never picks the fastest algorithm for the input shapes"
    fix_hint = "Set `torch.backends.cudnn.benchmark = True` once before training when input shapes stay fixed"
    default = False

    def finish(self) -> None:
        ctx = self.ctx
        # Test code trains toy models to check a library, not for speed.
        loops = [loop for loop in ctx.loops.training_loops() if not ctx.in_tests(loop)]
        if not loops or not ctx.calls_named(*_CONVS) or not ctx.devices.uses_accelerator():
            return
        if ctx.references(*_CUDNN_FLAGS):
            return  # benchmark (or determinism) is chosen explicitly somewhere in the script
        self.report(loops[0], where=Where.TRAIN)
