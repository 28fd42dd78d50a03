"""Issue 32, per-token and per-denoising-step costs an independent review found missed or
mis-described: the tokens a greedy decoder uploads back (TL113), a device argument read in
the callee's forward (TL112), a schedule's 0-d device tensor as a fill value (TL101), and the
loop a message names."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from conftest import FIXTURES
from torchlint.analysis.context import FileContext, Options
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source
from torchlint.findings import Location


def _findings(path, code):
    text = path.read_text(encoding="utf-8")
    return lint_source(text, str(path), from_table({"select": [code]}, FIXTURES))


def test_decoded_tokens_uploaded_back_say_what_changes_and_how_to_keep_them() -> None:
    found = {f.line: f for f in _findings(FIXTURES / "rules" / "TL113" / "flagged_decode.py", "TL113")}
    last, prefix = found[27], found[40]
    for finding in (last, prefix):
        assert "same host data" not in finding.message  # the list grows by one token each time
        assert "for every decoded token" in finding.message
        assert "before the loop" not in finding.fix_hint and "Upload it once" not in finding.fix_hint
    assert "token it just decoded" in last.message and "`argmax`" in last.fix_hint
    assert "one token longer each time" in prefix.message and "`torch.cat`" in prefix.fix_hint


def test_a_device_fill_value_says_torch_full_reads_it_and_how_to_broadcast() -> None:
    found = {f.line: f for f in _findings(FIXTURES / "rules" / "TL105" / "flagged_fill.py", "TL105")}
    assert sorted(found) == [29, 30, 31]
    for finding in found.values():
        assert "sampling loop at line 39" in finding.message  # the denoising loop that calls it
        assert "fill value is a Python number" in finding.fix_hint and "`.tolist()`" in finding.fix_hint


TRAINER = '''
import torch


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model.cuda(), opt
        self.steps = torch.zeros(2).cuda()

    def update(self):
        self.opt.step()
        self.steps += 1
        return int(self.steps.sum().item())

    def forward(self, batch):
        loss = self.model(batch.cuda()).mean()
        self.accelerator.backward(loss)
        return loss.item()

    def train_step(self, unet_number=1):
        loss = self(next(self.dl_iter))
        self.update()
        return loss

    def sample(self, texts):
        print(self.steps.tolist())
        return self.model.generate(texts)

    def save(self, path):
        torch.save(self.steps.cpu(), path)
'''
CLI = '''
from trainer import Trainer


def main(model, opt, epoches, every):
    trainer = Trainer(model, opt)
    for i in range(epoches):
        for _ in range(len(trainer.train_dl)):
            loss = trainer.train_step(unet_number=1)
        if not (i % every) and i > 0:
            trainer.sample(["a cat"])
        if not (i % every) and i > 0:
            trainer.save("model.pt")
'''


def test_a_loop_over_range_of_epochs_is_an_epoch_loop_not_a_sampling_loop(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "cli.py").write_text(CLI)
    config = from_table({"select": ["TL101", "TL102"], "min-impact": "low"}, tmp_path)
    by_line = {f.line: f for f in lint_paths([tmp_path], config).findings if Path(f.path).name == "trainer.py"}
    assert "training loop" in by_line[13].message and "training loop" in by_line[18].message
    assert not any("sampling loop" in f.message for f in by_line.values())
    for per_epoch in (by_line.get(26), by_line.get(30)):  # `sample()` and `save()` after the epoch's batches
        assert per_epoch is None or per_epoch.impact == "low" and "run once per epoch" in per_epoch.message


CASCADE = '''
import torch


class Cascade:
    def one_unet_sample(self, unet, shape, sigmas, resample_times):
        images = torch.randn(shape, device=self.device)
        for ind, (sigma, sigma_next) in enumerate(sigmas):
            sigma, sigma_next = map(lambda t: t.item(), (sigma, sigma_next))
            for r in reversed(range(resample_times)):
                model_output = unet.forward_with_cond_scale(images, sigma)
                images = images + (sigma_next - sigma) * model_output
        return images

    @torch.no_grad()
    def sample(self, shapes, sigmas, resample_times):
        img = None
        for unet_number, unet, shape in zip(range(1, 4), self.unets, shapes):
            img = self.one_unet_sample(unet, shape, sigmas, resample_times)
        return img
'''


def test_a_denoising_loop_is_the_step_not_the_loop_over_a_cascade_of_unets() -> None:
    findings = lint_source(CASCADE, "cascade.py", from_table({"select": ["TL101"], "min-impact": "low"}, FIXTURES))
    (read,) = [f for f in findings if f.line == 9]
    assert "in a sampling loop makes" in read.message  # the loop over sigmas around it, not the per-unet loop at line 18
    assert "line 18" not in read.message


def test_ddim_sampling_with_an_inpainting_mask_is_a_denoising_loop() -> None:
    code = '''
import torch


class DDIMSampler:
    @torch.no_grad()
    def ddim_sampling(self, cond, shape, time_range, x0=None, mask=None):
        img = torch.randn(shape, device=self.device)
        for i, step in enumerate(time_range):
            ts = torch.full((shape[0],), step, device=self.device, dtype=torch.long)
            if mask is not None:
                img_orig = self.model.q_sample(x0, ts)
                img = img_orig * mask + (1. - mask) * img
            outs = self.p_sample_ddim(img, cond, ts, index=len(time_range) - i - 1)
            img, pred_x0 = outs
        return img
'''
    ctx = FileContext(cst.parse_module(code), "ddim.py", Options())
    (loop,) = ctx.tree.nodes(cst.For)
    assert ctx.loops.denoises(loop) and ctx.places.repeat_of(loop).kind == "denoising step"


def test_a_function_reached_once_per_epoch_says_so() -> None:
    from torchlint.analysis.multiplicity import Where
    from torchlint.analysis.join_steps import StepInfo

    assert "(run once per epoch from an epoch loop at line 7)" in StepInfo("an epoch loop", (Location("x.py", 7, 1),), Where.EPOCH).text("save", "x.py")
    assert "(run every step from a training loop" in StepInfo("a training loop", (), Where.TRAIN).text("save", "x.py")


def test_a_sort_of_device_scores_counts_its_comparisons() -> None:
    """Each comparison of a sort of device scores reads (about n·log2 n): the multiplicity
    says so, innermost; after the first each waits only for its own small kernel, so a `max`
    once per decoded token stays one real wait per token, while a sort per beam per decoded
    token is high."""
    found = {f.line: f for f in _findings(FIXTURES / "rules" / "TL105" / "flagged_beam_scores.py", "TL105")}
    sort = found[29]
    assert "per comparison per beam per decoded token" in sort.message and sort.impact == "high"
    most = found[31]  # `max(...)` of the kept scores, once per decoded token: n - 1 comparisons, one real wait
    assert "per comparison per decoded token" in most.message and most.impact == "medium"
