"""Review 1's precision defects, as classes: host tensors and NumPy arrays taken for device
tensors, a project with no accelerator, small uploads and reads at the step's boundary,
reads after a synchronize, and counts that are Python ints."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.analysis.context import FileContext, Options
from torchlint.config import from_table
from torchlint.engine import lint_paths, lint_source

PROJECT = FIXTURES / "projects" / "precision"
RULES = ["TL101", "TL102", "TL103", "TL104", "TL105", "TL106", "TL110", "TL114"]


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("project") / "precision"
    shutil.copytree(PROJECT, root)
    result = lint_paths([root], from_table({"select": RULES, "min-impact": "low"}, root))
    assert not result.errors
    return root, result.findings


def test_the_findings_and_tiers_match_the_markers(findings) -> None:  # type: ignore[no-untyped-def]
    root, found = findings
    actual = {(Path(f.path).relative_to(root).as_posix(), f.line, f.code): f.impact for f in found}
    expected = {(p.relative_to(root).as_posix(), line, code) for p in root.rglob("*.py") for line, code in expected_markers(p.read_text())}
    assert set(actual) == expected
    tiers = {(p.relative_to(root).as_posix(), line, code): tier for p in root.rglob("*.py") for (line, code), tier in expected_impacts(p.read_text()).items()}
    assert {key: actual[key] for key in tiers} == tiers


def test_the_reasons_say_where_the_read_sits(findings) -> None:  # type: ignore[no-untyped-def]
    root, found = findings
    by = {(Path(f.path).name, f.line, f.code): f for f in found}
    first_line = by[("uploads.py", 16, "TL101")]  # `batch[-1].item()` before any layer of the step's first model call
    assert "at its start" in first_line.impact_reason and "about 1 %" in first_line.impact_reason
    small = by[("uploads.py", 30, "TL110")]
    assert small.impact_reason.startswith("a small tensor made on the host") and "at its start" in small.impact_reason
    assert by[("uploads.py", 17, "TL110")].impact == "low"  # the read in its own arguments drained the queue
    assert by[("uploads.py", 32, "TL110")].impact_reason.startswith("a tensor made on the host")  # 4 sizes: maybe megabytes
    assert "right after a sync" in by[("meters.py", 16, "TL101")].impact_reason


def _context(code: str) -> FileContext:
    return FileContext(cst.parse_module(code), "m.py", Options())


def _last(ctx: FileContext, name: str) -> cst.Name:
    return [n for n in ctx.tree.nodes(cst.Name) if n.value == name][-1]


NESTED = """import torch
def run(model, xs):
    for x in xs:
        def show(tokens):
            return tokens.tolist()
        host = torch.tensor(x.tokens)
        show(host[:3])
        show(tokens=host)
"""


def test_a_nested_functions_parameter_is_where_its_callers_put_it() -> None:
    ctx = _context(NESTED)
    tokens = [n for n in ctx.tree.nodes(cst.Name) if n.value == "tokens"][1]  # the receiver of `.tolist()`
    assert ctx.devices.moved_to_host(tokens, tokens)
    # one caller passing a device tensor, or the function handed on, and it is not known
    for changed in (NESTED + "        show(model(x))\n", NESTED + "        xs.map(show)\n", NESTED.replace("show(tokens=host)", "show(*[host])")):
        ctx = _context(changed)
        tokens = [n for n in ctx.tree.nodes(cst.Name) if n.value == "tokens"][1]
        assert not ctx.devices.moved_to_host(tokens, tokens), changed


@pytest.mark.parametrize("setting", ['torch.set_default_device("cuda")', "torch.set_default_tensor_type(torch.cuda.FloatTensor)",
                                     "Tensor = torch.cuda.FloatTensor"])
def test_a_default_device_keeps_factories_off_the_host(setting: str) -> None:
    code = f"import torch\n{setting}\nt = torch.zeros(3)\nprint(t)\n"
    ctx = _context(code)
    assert not ctx.devices.moved_to_host(_last(ctx, "t"), _last(ctx, "t"))
    ctx = _context(code.replace(setting, 'torch.set_default_device("cpu")'))
    assert ctx.devices.moved_to_host(_last(ctx, "t"), _last(ctx, "t"))


def test_a_numpy_array_with_tensor_like_methods_is_no_tensor() -> None:
    ctx = _context("import numpy as np\nimport torch\nd = np.array(xs)\nd = d[d.nonzero()]\nprint(d.view())\n")
    d = _last(ctx, "d")
    assert not ctx.syncs.tensorish(d, d)
    ctx = _context("import torch\nd = model(xs)\nd = d[d.nonzero()]\nprint(d.view())\n")
    d = _last(ctx, "d")
    assert ctx.syncs.tensorish(d, d)


def test_a_process_rank_is_no_device(tmp_path: Path) -> None:
    """A3C's workers have ranks and no device: host only. Given to `.to()`, a rank is one."""
    shutil.copy(PROJECT / "a3c.py", tmp_path / "a3c.py")
    config = from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)
    assert lint_paths([tmp_path], config).findings == []
    text = (PROJECT / "a3c.py").read_text().replace("model = ActorCritic()", "model = ActorCritic().to(rank)")
    (tmp_path / "a3c.py").write_text(text.replace("torch.randn(5, 4)", "torch.randn(5, 4, device=rank)"))
    assert [f.code for f in lint_paths([tmp_path], config).findings] == ["TL101"]


def test_a_legacy_cuda_type_called_in_place_sets_no_default() -> None:
    """dino's utils.py calls `torch.cuda.FloatTensor(self.mean)` once: its `torch.tensor([...])`
    elsewhere is still built on the host (`Tensor = torch.cuda.FloatTensor` above is a default)."""
    code = "import torch\nm = torch.cuda.FloatTensor(mean)\nt = torch.tensor([1, 2])\nprint(t)\n"
    ctx = _context(code)
    assert ctx.devices.moved_to_host(_last(ctx, "t"), _last(ctx, "t"))


HOST_SEARCH = """import numpy as np
import torch
from scipy.cluster.vq import kmeans


def evolve(labels, n=9, thr=4.0, gen=1000):
    if isinstance(labels, str):
        with open(labels) as f:
            labels = f.read()
    def metric(k, wh):
        r = wh[:, None] / k[None]
        return r.min(2)[0]
    def fitness(k):
        best = metric(torch.tensor(k, dtype=torch.float32), wh)
        return (best * (best > thr).float()).mean()
    def show(k, verbose=True):
        k = k[np.argsort(k.prod(1))]
        x = metric(k, wh0)
        print(f"{(x > thr).float().mean() * n:.2f}")
        for x in k:
            print(x)
        return k
    wh0 = np.concatenate(labels)
    k = kmeans(wh0, n)[0]
    wh, wh0 = (torch.tensor(a, dtype=torch.float32) for a in (wh0, wh0))
    k = show(k, verbose=False)
    f = fitness(k)
    for _ in range(gen):
        kg = (k.copy() * np.random.rand(*k.shape)).clip(min=2.0)
        fg = fitness(kg)
        if fg > f:
            f, k = fg, kg.copy()
    return k
"""


@pytest.mark.parametrize("name, line", [("fg", 31), ("f", 31), ("x", 19)])
def test_values_built_from_numpy_and_host_tensors_stay_on_the_host(name: str, line: int) -> None:
    """yolov5's anchor evolution: NumPy (and scipy) arrays, `torch.tensor(array)` made in a
    generator, nested helpers given only those, a `with ... as f` assigned over before the
    loop, a comprehension's and a later loop's variable that never reach the read."""
    ctx = _context(HOST_SEARCH)
    node = next(n for n in ctx.tree.nodes(cst.Name) if n.value == name and _line(ctx, n) == line)
    assert ctx.devices.moved_to_host(node, node)
    assert not ctx.syncs.device_tensor(node, node)


def test_a_tensor_passed_or_made_on_the_device_is_not_taken_for_a_host_value() -> None:
    """The near-misses: a parameter defaulting to None (a caller passes the tensor), a
    device tensor compared with a number, a list of device tensors, `torch.as_tensor` of a
    model's output (yolov5's masks), a factory moved to another tensor's device (fairseq's
    `torch.zeros(...).to(src_tokens)`)."""
    code = ("import torch\ndef f(x=None, thr=4.0, src=None):\n    y = x > thr\n    z = torch.zeros(3, device='cuda') > thr\n"
            "    w = [t.cuda() for t in x]\n    m = model(src).permute(1, 0)\n    m = torch.as_tensor(m, dtype=torch.uint8)\n"
            "    tokens = torch.zeros(4, 8).to(src).long()\n    return y, z, w, m.contiguous(), tokens\n")
    ctx = _context(code)
    for name in ("y", "z", "w", "m", "tokens"):
        node = _last(ctx, name)
        assert not ctx.devices.moved_to_host(node, node), name


def _line(ctx: FileContext, node: cst.CSTNode) -> int:
    from torchlint.analysis.positions import compute_spans

    span = compute_spans(ctx.module, [node])[id(node)]
    return span[0] if isinstance(span[0], int) else span[0].line


def test_a_loop_around_a_whole_training_run_is_no_sampling_loop(tmp_path: Path) -> None:
    """yolov5's hyperparameter evolution calls `train()` per individual; `train()` has its own
    training loop and checks its anchors once before it (a forward, then `.cpu()`): once per run."""
    (tmp_path / "anchors.py").write_text(
        "import torch\n\ndef check_anchors(model, x):\n    out = model(x)\n    return out.cpu().numpy()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom anchors import check_anchors\n\n"
        "class Net(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
        "def train(hyp, loader, device):\n    model = Net().to(device)\n    opt = torch.optim.SGD(model.parameters(), lr=hyp)\n"
        "    check_anchors(model, torch.zeros(1, 4, device=device))\n"
        "    for x, y in loader:\n        loss = model(x.to(device)).sum()\n        loss.backward()\n        opt.step()\n    return loss.item()\n\n"
        "def evolve(population, loader, device):\n    scores = []\n    for hyp in population:\n        scores.append(train(hyp, loader, device))\n    return scores\n")
    config = from_table({"select": ["TL102"], "min-impact": "low"}, tmp_path)
    assert lint_paths([tmp_path], config).findings == []
    # the same helper called from the training loop is per step
    text = (tmp_path / "train.py").read_text().replace("        opt.step()\n", "        opt.step()\n        check_anchors(model, x.to(device))\n")
    (tmp_path / "train.py").write_text(text)
    assert [f.code for f in lint_paths([tmp_path], config).findings] == ["TL102"]


def test_a_loop_that_calls_generate_is_per_generation_not_per_token() -> None:
    """fairseq's `for sample in itr: hypos = generator.generate(model, sample)`: a whole
    decode per iteration; the reads after it are once per batch, not per decoded token."""
    code = ("import torch\n\ndef main(generator, model, itr):\n    for sample in itr:\n"
            "        hypos = generator.generate(model, sample)\n        for hypo in hypos:\n            print(hypo['tokens'].tolist())\n")
    findings = lint_source(code, "gen.py", from_table({"select": ["TL101"], "min-impact": "low"}, Path(".")))
    assert [f.code for f in findings] == ["TL101"]
    # (a loop over `hypos`, each iteration of the outer loop one generated sequence, no decoded token)
    assert "(per hypothesis per generated sequence)" in findings[0].message and findings[0].impact == "low", findings[0].message


def test_a_read_after_its_functions_own_work_is_not_at_the_steps_start(tmp_path: Path) -> None:
    """attention-is-all-you-need's `translate_sentence`: called first in the batch loop, it
    decodes, then reads the result: that read comes after the decode, once per generated sequence. A
    read on the method's first line, before its decode loop, is once per generated sequence as well."""
    (tmp_path / "translator.py").write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Translator(nn.Module):\n    def __init__(self, model):\n        super().__init__()\n        self.model = model\n\n"
        "    def translate(self, src, max_len=50):\n        first = src[0, 0].item()\n        seq = src\n"
        "        for step in range(max_len):\n            logits = self.model(seq)\n"
        "            seq = torch.cat([seq, logits[:, -1:].argmax(-1)], 1)\n"
        "        return first, seq[0].tolist()\n")
    (tmp_path / "translate.py").write_text(
        "import torch\nfrom translator import Translator\n\n"
        "def main(model, test_loader, device):\n    translator = Translator(model).to(device)\n"
        "    for example in test_loader:\n        pred = translator.translate(torch.LongTensor([example]).to(device))\n        print(pred)\n")
    config = from_table({"select": ["TL101"], "min-impact": "low"}, tmp_path)
    found = {f.line: f for f in lint_paths([tmp_path], config).findings if f.path.endswith("translator.py")}
    # after the decode: once per generated sequence (issue 32, review 11), not at the step's start
    assert "after its decode loop" in found[15].impact_reason and found[15].impact == "low", found[15].impact_reason
    # before the decode, even on the method's first line: once per generated sequence too (review 12, DALLE's
    # `generate_texts`), no longer "at the step's start"
    assert "before its decode loop" in found[10].impact_reason and found[10].impact == "low", found[10].impact_reason


def test_a_few_values_per_row_and_a_few_numbers_are_small_uploads() -> None:
    # Review 16: so-vits-svc's `torch.Tensor(f0.shape[0], 1).to(d)` is a vector's worth (one size the code does not
    # spell beside literal ones), and TL113's `torch.tensor(0., device=d)` a few numbers: a small upload's reason
    # (its bytes cost nothing, its wait is the cost); many features per row, or a table of the module, are not.
    code = (FIXTURES / "rules" / "TL110" / "flagged_small_per_row.py").read_text()
    by_line = {f.line: f for f in lint_source(code, "rows.py", from_table({"select": ["TL110"], "min-impact": "low"}, Path(".")))}
    assert by_line[14].impact_reason.startswith("a small tensor made") and by_line[16].impact_reason.startswith("a small tensor made")
    assert by_line[22].impact_reason.startswith("a tensor made on the host")  # 256 values per row: an activation's size
    constants = ("import torch\nimport numpy as np\nTABLE = np.ones(5)\n"
                 "for x in loader:\n    a = torch.tensor(0., device='cuda')\n    b = torch.from_numpy(TABLE).to('cuda')\n    model(x, a, b).backward()\n")
    found = {f.line: f for f in lint_source(constants, "c.py", from_table({"select": ["TL113"], "min-impact": "low"}, Path(".")))}
    assert found[5].impact_reason.startswith("a small tensor made") and found[6].impact_reason.startswith("a tensor made on the host")


ENVIRONMENT = """import torch
def rollout(envs, agent):
    obs, info = envs.reset()
    first = info["seed"]
    for step in range(100):
        action = agent(obs)
        obs, reward, terminated, truncated, info = envs.step(action.cpu().numpy())
        final = info["final_info"]
        success = final.get("is_success", [False])
        done = terminated
        print(first, success, final, done, obs)
"""


@pytest.mark.parametrize(("name", "host"), [("success", True), ("final", True), ("first", False), ("done", False)])
def test_a_host_environments_info_dict_is_on_the_host(name: str, host: bool) -> None:
    """Gym's `info` (the last of `env.step`'s five or four results) holds Python and NumPy values where the
    environment is given its action on the host; `env.reset()`'s says nothing of where the environment runs."""
    ctx = _context(ENVIRONMENT)
    assert ctx.devices.moved_to_host(_last(ctx, name), _last(ctx, name)) is host
    # an environment given the policy's action as it is (Isaac Gym), or a step of no environment: not known
    for changed in (ENVIRONMENT.replace("action.cpu().numpy()", "action"), ENVIRONMENT.replace("envs.step(", "planner.step(")):
        ctx = _context(changed)
        assert ctx.devices.moved_to_host(_last(ctx, name), _last(ctx, name)) is False, changed
