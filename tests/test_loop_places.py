"""Where loops put a line (issue 32, review 8): per-epoch code beside the batch loop, loops
that run once, every-2nd-step guards, and full-batch epochs, in the words of the messages."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from torchlint.analysis.context import FileContext, Options
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source


def _lint(source: str, *rules: str, name: str = "train.py"):  # type: ignore[no-untyped-def]
    return lint_source(source, name, from_table({"select": list(rules), "min-impact": "low"}, Path(".")))


def _at(found, source: str, text: str):  # type: ignore[no-untyped-def]
    """The findings on the line of ``source`` that holds ``text``."""
    line = next(number for number, code in enumerate(source.splitlines(), start=1) if text in code)
    return [f for f in found if f.line == line]


EPOCH = """import torch
from torch.utils.data import DataLoader
from models import Net, Sampler

model = Net().cuda()
sampler = Sampler(model)
opt = torch.optim.Adam(model.parameters())
loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)
for epoch in range(epochs):
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(loss.item())
    with torch.no_grad():
        for bib in range(len(x)):
            s = sampler(noise=torch.randn(1, 256, device="cuda"), embedding=x[bib])
            n = s.sum().item()
            writer.add_audio("pred/y" + str(bib), s.cpu().numpy(), epoch)
            if bib >= 5:
                break
"""


def test_code_beside_an_epochs_batch_loop_runs_once_per_epoch() -> None:
    """StyleTTS2's train_second.py: a few samples made and logged after validation, once per
    epoch, were "every step of a sampling loop", high (a model call in the loop, `len` read as
    a sequence length)."""
    found = _lint(EPOCH, "TL101", "TL102")
    assert not _at(found, EPOCH, "print(loss.item())")  # one read per epoch, after its batches: what TL101 advises
    for text in ("n = s.sum().item()", "s.cpu()"):
        [finding] = _at(found, EPOCH, text)
        assert finding.impact == "low"
        assert "in an epoch loop" in finding.message and "once per epoch" in finding.message
        assert "every step" not in finding.message and "once per epoch" in finding.impact_reason


def test_a_per_epoch_loop_that_trains_is_still_a_training_loop() -> None:
    source = EPOCH.replace('writer.add_audio("pred/y" + str(bib), s.cpu().numpy(), epoch)', "s.sum().backward()\n            opt.step()")
    [finding] = _at(_lint(source, "TL101"), source, "n = s.sum().item()")
    assert finding.impact == "medium" and "in a training loop" in finding.message  # (once per step, issue 32)


VALIDATION = """import torch
from tqdm import tqdm

for epoch in range(epochs):
    model.train()
    for x in train_loader:
        loss = model(x.cuda())
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    val_pbar = tqdm(val_loader)
    with torch.no_grad():
        for batch in val_pbar:
            for seq in batch.cuda():
                start = (seq == 3).nonzero()[0][0].item()
                generated = model.generate(seq[:start + 1].unsqueeze(0), seq_len=16)
"""


def test_a_loop_within_a_pass_over_what_may_be_a_loader_is_no_per_epoch_loop() -> None:
    """x-transformers' validation: `for batch in val_pbar:` (a tqdm over the loader, through a
    name), then a generation per sequence: many times per epoch, not once."""
    [finding] = _at(_lint(VALIDATION, "TL101"), VALIDATION, "start = (seq == 3)")
    assert "once per epoch" not in finding.message and "epoch loop" not in finding.message


def _repeat_of(source: str):  # type: ignore[no-untyped-def]
    ctx = FileContext(cst.parse_module(source), "m.py", Options())
    return ctx.places.repeat_of(next(iter(ctx.tree.nodes(cst.For))))


def test_a_range_of_len_is_no_decoded_tokens_bound() -> None:
    assert _repeat_of("import torch\nmodel = torch.nn.Linear(2, 2)\nfor bib in range(len(texts)):\n    y = model(texts[bib])\n").kind == "iteration"
    assert _repeat_of("import torch\nmodel = torch.nn.Linear(2, 2)\nfor t in range(seq_len):\n    y = model(x)\n").kind == "decoded token"


def test_a_range_that_draws_its_own_batches_goes_over_batches_not_tokens() -> None:
    # llm.c's validation (review 17): "steps" in the bound, a model run, but each iteration draws a batch
    draws = "import torch\nmodel = torch.nn.Linear(2, 2)\nfor _ in range(val_max_steps):\n    x, y = val_loader.next_batch()\n    y = model(x)\n"
    assert _repeat_of(draws).kind == "iteration"
    assert _repeat_of(draws.replace("val_loader.next_batch()", "next(val_iter)")).kind == "iteration"
    # the near-miss: a method of another name is no loader's draw, and the steps stay tokens
    assert _repeat_of(draws.replace("val_loader.next_batch()", "val_loader.peek()")).kind == "decoded token"


ONE_SPLIT = """import torch
import torch.nn.functional as F

model = torch.nn.Linear(8, 4).cuda()
optimizer = torch.optim.Adam(model.parameters())
data = dataset[0].cuda()


def train():
    optimizer.zero_grad()
    F.cross_entropy(model(data.x), data.y).backward()
    optimizer.step()


@torch.no_grad()
def test():
    pred = model(data.x).argmax(dim=-1)
{loop}
        accs = pred.eq(data.y[mask]).sum().item()
        print(accs)
    return accs


for epoch in range(200):
    train()
    test()
"""


@pytest.mark.parametrize("loop", [
    "    for _, mask in data('test_mask'):",  # GCNII's PyG/cora/cora.py: one key, one (key, value) pair
    "    for mask in (data.test_mask,):",
    "    for mask in [data.test_mask]:",
    "    for _ in range(1):\n        mask = data.test_mask",
])
def test_a_loop_that_runs_once_multiplies_nothing(loop: str) -> None:
    source = ONE_SPLIT.format(loop=loop)
    [finding] = _at(_lint(source, "TL101"), source, "accs = pred")
    assert "per iteration" not in finding.message and "times per" not in finding.message
    assert finding.impact == "low"  # one read per evaluation (`test()` every epoch), as without the loop


def test_a_loop_over_two_keys_still_repeats() -> None:
    source = ONE_SPLIT.format(loop="    for _, mask in data('val_mask', 'test_mask'):")
    [finding] = _at(_lint(source, "TL101"), source, "accs = pred")
    assert "(2 times per step)" in finding.message


TD3 = """import torch


def td3(env_fn, policy_delay=2, update_every=50):
    ac = ActorCritic().cuda()
    pi_optimizer = torch.optim.Adam(ac.pi.parameters())
    q_optimizer = torch.optim.Adam(ac.q.parameters())

    def update(data, timer):
        q_optimizer.zero_grad()
        loss_q = ac.q(data).mean()
        loss_q.backward()
        q_optimizer.step()
        if timer % policy_delay == 0:
            pi_optimizer.zero_grad()
            loss_pi = -ac.pi(data).mean()
            loss_pi.backward()
            pi_optimizer.step()
            print(loss_pi.item())

    for t in range(1000):
        if t % update_every == 0:
            for j in range(update_every):
                update(data=buffer.sample(), timer=j)
"""


def test_an_every_second_step_guard_says_so_and_keeps_the_per_step_tier(tmp_path: Path) -> None:
    """spinningup's td3: `if timer % policy_delay == 0:` with `policy_delay=2` is no rare
    guard (half the steps: as good as every step, rules/TL101), and the reason says "only on
    every 2nd step" rather than a plain "every step"."""
    (tmp_path / "td3.py").write_text(TD3)
    result = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path))
    [finding] = _at(result.findings, TD3, "print(loss_pi.item())")
    assert finding.impact == "medium"
    assert "only on every 2nd step (`if timer % policy_delay == 0:`, `policy_delay` is 2)" in finding.impact_reason


@pytest.mark.parametrize(("guard", "words"), [
    ("if step % 2 == 0:", "only on every 2nd step (`if step % 2 == 0:`)"),
    ("if step % EVERY == 0:", "only on every 3rd step (`if step % EVERY == 0:`, `EVERY` is 3)"),
    ("if step % 1 == 0:", None),  # every step
    ("for i in range(x.size(0)):\n            if i % 2 == 0:", None),  # every other row, each step
])
def test_a_small_period_guard_in_the_loop_says_how_often(guard: str, words: str | None) -> None:
    source = (f"import torch\nEVERY = 3\nmodel = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              f"for step, (x, y) in enumerate(loader):\n    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()\n"
              f"    if True:\n        {guard}\n            print(loss.item())\n")
    [finding] = _at(_lint(source, "TL101"), source, "print(loss.item())")
    assert (words in finding.impact_reason) if words else ("only on every" not in finding.impact_reason)


FULL_BATCH = """import torch
import torch.nn.functional as F

model = GCN().cuda()
optimizer = torch.optim.Adam(model.parameters())


def train():
    model.train()
    optimizer.zero_grad()
    loss_train = F.nll_loss(model(features, adj)[idx_train], labels[idx_train])
    loss_train.backward()
    optimizer.step()
    return loss_train.item()


for epoch in range(200):
    loss = train()
"""


def test_a_full_batch_epoch_loop_is_named_as_one_step_per_epoch(tmp_path: Path) -> None:
    """GCNII's train.py: each epoch is one full-batch step; the message says so instead of
    "every step from a training loop" over an epoch loop."""
    (tmp_path / "train.py").write_text(FULL_BATCH)
    result = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path))
    [finding] = _at(result.findings, FULL_BATCH, "return loss_train.item()")
    assert "(run every step from an epoch loop of full-batch training steps at line 18)" in finding.message
    local = FULL_BATCH.replace("    loss = train()", "    loss = train()\n    out = model(features, adj)\n    F.nll_loss(out, labels).backward()\n"
                               "    optimizer.step()\n    print(out.max().item())")
    [here] = _at(_lint(local, "TL101"), local, "print(out.max().item())")
    assert "in an epoch loop of full-batch training steps" in here.message


def test_a_delayed_update_of_unknown_period_after_the_steps_own_update_is_every_n(tmp_path: Path) -> None:
    """spinningup's exercise copy of td3, run as `td3(**all_kwargs)`: N unknown, and the branch
    steps the policy's optimizer after the critic's step of the same `update()`: no gradient
    accumulation branch (which would hold the step's only optimizer step), so every N steps."""
    source = TD3.replace("policy_delay=2, ", "")
    (tmp_path / "td3.py").write_text(source)
    result = lint_paths([tmp_path], from_table({"select": ["TL101", "TL305"], "min-impact": "low"}, tmp_path))
    assert not _at(result.findings, source, "print(loss_pi.item())")  # under a rare guard: TL101 is exempt
    assert [f.code for f in _at(result.findings, source, "loss_q = ac.q(data).mean()")] == []
    accumulating = source.replace("        q_optimizer.step()\n", "")
    (tmp_path / "td3.py").write_text(accumulating)
    result = lint_paths([tmp_path], from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path))
    [finding] = _at(result.findings, accumulating, "print(loss_pi.item())")  # the branch holds the only step: every step
    assert "every step of a training loop" in finding.impact_reason


def test_an_every_n_guard_names_its_period() -> None:
    source = ("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              "for step, (x, y) in enumerate(loader):\n    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()\n"
              "    if step % args.policy_delay == 0:\n        with torch.no_grad():\n            for p, p_targ in zip(model.parameters(), target.parameters()):\n"
              "                p_targ.data.mul_(0.99)\n                p_targ.data.add_(0.01 * p.data)\n")
    [finding] = _lint(source, "TL305")
    assert finding.impact == "low" and "every `args.policy_delay` steps (`step % args.policy_delay`)" in finding.impact_reason


def test_a_generators_loop_that_yields_each_pass_is_no_loop_of_the_step() -> None:
    """x-transformers' train_copy.py (review 13): `next(cycle())` takes one item of a generator's
    `while True: ... yield`, so its host-made tensors are one copy per step, not "per iteration"; a
    loop inside the pass, or a yield under a branch, still repeats."""
    path = Path(__file__).parent.parent / "fixtures" / "rules" / "TL110" / "flagged_generated_batches.py"
    source = path.read_text(encoding="utf-8")
    found = _lint(source, "TL110")
    [randint] = _at(found, source, "torch.randint(2, 18")
    assert "per iteration" not in randint.message and randint.impact == "medium"
    [inner] = _at(found, source, "parts.append(")
    assert inner.message.endswith("(per iteration per step)") and inner.impact == "high"
    [branch] = _at(found, source, "x = torch.ones(len(row))")
    assert "(per iteration per step)" in branch.message
    [first] = _at(found, source, "first = next(")
    assert "per " not in first.message.split("`.to(DEVICE)`")[-1]


UPDATES_PER_EPOCH = """import torch
from tqdm import trange

for epoch in trange(config.num_epochs):
    for _ in trange(config.num_updates_on_epoch):
        batch = buffer.sample(config.batch_size)
        loss = trainer.critic(batch).mean()
        loss.backward()
        trainer.optimizer.step()
        print(loss.item())
"""


def test_a_count_of_updates_per_epoch_is_no_epoch_loop() -> None:
    """CORL's EDAC: the inner `trange(config.num_updates_on_epoch)` counts the steps inside an
    epoch; it is the training loop, not an epoch loop of full-batch steps."""
    [finding] = _at(_lint(UPDATES_PER_EPOCH, "TL101"), UPDATES_PER_EPOCH, "print(loss.item())")
    assert "in a training loop" in finding.message and "epoch loop" not in finding.message
    per_epoch = UPDATES_PER_EPOCH.replace("config.num_updates_on_epoch", "config.steps_per_epoch")
    [same] = _at(_lint(per_epoch, "TL101"), per_epoch, "print(loss.item())")
    assert "epoch loop" not in same.message


TD3_BC = """import torch


def soft_update(target, source, tau):
    for target_param, source_param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_((1 - tau) * target_param.data + tau * source_param.data)


class TD3_BC:
    def __init__(self, actor, actor_target, critic, critic_optimizer, actor_optimizer, policy_freq: int = 2):
        self.actor, self.actor_target, self.critic = actor, actor_target, critic
        self.critic_optimizer, self.actor_optimizer = critic_optimizer, actor_optimizer
        self.policy_freq = policy_freq
        self.total_it = 0

    def train(self, batch):
        self.total_it += 1
        state, action = batch
        critic_loss = self.critic(state, action).mean()
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
        if self.total_it % self.policy_freq == 0:
            actor_loss = -self.critic(state, self.actor(state)).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            soft_update(self.actor_target, self.actor, 0.005)
"""

TD3_BC_LOOP = """import torch
from td3_bc import TD3_BC
from nets import Actor, Critic

actor, critic = Actor().cuda(), Critic().cuda()
trainer = TD3_BC(actor, Actor().cuda(), critic, torch.optim.Adam(critic.parameters()), torch.optim.Adam(actor.parameters()))
for t in range(1000):
    batch = [b.to("cuda") for b in buffer.sample(256)]
    trainer.train(batch)
"""


@pytest.mark.parametrize("also_every_step", [False, True])
def test_an_every_second_step_guard_of_a_caller_in_another_file_says_so(tmp_path: Path, also_every_step: bool) -> None:
    """CORL's td3_bc: the training loop calls `trainer.train(batch)` in another file, whose
    `if self.total_it % self.policy_freq == 0:` (`policy_freq: int = 2`) calls `soft_update`:
    the guard's words travel with the reach (`CallSite.guard`, `StepInfo.guard`), in the message
    and the reason, at the per-step tier; a call of `soft_update` outside the guard too runs it
    on every step, and nothing says "every 2nd step"."""
    text = TD3_BC + ("        soft_update(self.critic, self.critic, 0.005)\n" if also_every_step else "")
    (tmp_path / "td3_bc.py").write_text(text)
    (tmp_path / "main.py").write_text(TD3_BC_LOOP)
    result = lint_paths([tmp_path], from_table({"select": ["TL305"], "min-impact": "low"}, tmp_path))
    [finding] = [f for f in result.findings if Path(f.path).name == "td3_bc.py"]
    assert finding.impact == "medium"
    words = "but only on every 2nd step (`if self.total_it % self.policy_freq == 0:`, `self.policy_freq` is 2)"
    if also_every_step:
        assert "every 2nd" not in finding.message and "every 2nd" not in finding.impact_reason
    else:
        assert f"(called from `TD3_BC.train()`, run every step from a training loop, {words})" in finding.message
        assert words in finding.impact_reason


@pytest.mark.parametrize(("iterated", "count"), [
    ("range(start_pos, total_len)", "range(start_pos, total_len)"),
    ("tqdm(range(0, max_time_steps), desc='coarse')", "range(0, max_time_steps)"),
    ("trange(n)", "trange(n)"),
    ("enumerate(trange(n))", "trange(n)"),
    ("tqdm.tqdm(reversed(range(n)))", "range(n)"),
    ("enumerate(prompts)", None),  # the items given: their length, no count
    ("chunks(range(n))", None),  # a call that is no progress bar nor pass-through: whatever it makes of the count
    ("tqdm(loader)", None),
])
def test_the_count_a_loop_goes_over_inside_its_progress_bar(iterated: str, count: str | None) -> None:
    from torchlint.analysis.loop_shapes import counted_range

    found = counted_range(cst.parse_expression(iterated))
    assert (cst.Module([]).code_for_node(found) if found is not None else None) == count


def test_device_tensors_walked_together_go_over_batch_rows() -> None:
    # StyleTTS2's per-sample losses: `zip(d, d_gt, input_lengths)` of the step's device tensors gives one row of each
    rows = ("import torch\nd = torch.randn(16, 50, device='cuda')\nd_gt = y.cuda()\nlengths = n.cuda()\n"
            "for pred, target, n in zip(d, d_gt, lengths):\n    loss = (pred[:n] - target[:n]).abs().mean()\n")
    assert _repeat_of(rows).kind == "batch row"
    # the near-miss: one device tensor walked alone is its elements (`for w in words`), whatever it holds
    assert _repeat_of("import torch\nwords = torch.randn(16, device='cuda')\nfor w in words:\n    print(int(w))\n").kind == "element"
