"""A package imported under a root the checked tree lacks: a monorepo's copy of a project
imports ``deeplearning.ssl.moco.builder`` where the checked tree holds ``moco/builder.py``
(facebookresearch/moco's last snapshot). The model's ``forward`` is still the step's, so its
per-parameter momentum update and its reads are reported from the training loop
(``Project._split_rooted_elsewhere``). Near misses: a tail that does not define the name
looked up, and a known library's import (``torch.utils.data.DataLoader`` beside a project
``utils/data.py`` with its own ``DataLoader``), resolve to nothing of the project."""

from __future__ import annotations

from pathlib import Path

from torchlint.analysis.project import Project
from torchlint.analysis.summary import FileSummary
from torchlint.config import from_table
from torchlint.engine import lint_paths

BUILDER = (
    "import torch\nfrom torch import nn\n\n\nclass MoCo(nn.Module):\n"
    "    def __init__(self, q, k):\n        super().__init__()\n        self.encoder_q, self.encoder_k = q, k\n"
    "        self.register_buffer(\"queue_ptr\", torch.zeros(1, dtype=torch.long))\n\n"
    "    @torch.no_grad()\n    def _momentum_update(self):\n"
    "        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):\n"
    "            param_k.data = param_k.data * 0.999 + param_q.data * 0.001\n\n"
    "    def forward(self, im_q, im_k):\n        q = self.encoder_q(im_q)\n        self._momentum_update()\n"
    "        ptr = int(self.queue_ptr)\n        return q + self.encoder_k(im_k) + ptr\n"
)
TRAIN = (
    "import torch\nimport {root}moco.builder\n\n\ndef train(loader, q, k, opt):\n"
    "    model = {root}moco.builder.{name}(q, k).cuda()\n    for im_q, im_k in loader:\n"
    "        loss = model(im_q.cuda(), im_k.cuda()).sum()\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n"
)


def _found(root: Path, train: str, extra: dict[str, str] | None = None) -> dict[tuple[str, str], str]:
    files = {"moco/__init__.py": "", "moco/builder.py": BUILDER, "main_moco.py": train, **(extra or {})}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    findings = lint_paths([root], from_table({"select": ["TL305", "TL105"]}, root)).findings
    return {(f.code, Path(f.path).name): f.message for f in findings}


def test_a_model_imported_under_a_monorepo_root_is_the_training_loops(tmp_path: Path) -> None:
    found = _found(tmp_path, TRAIN.format(root="deeplearning.cross_image_ssl.", name="MoCo"))
    assert "from a training loop at" in found[("TL305", "builder.py")]
    assert "from a training loop at" in found[("TL105", "builder.py")]


def test_the_same_model_under_its_own_root_reads_the_same(tmp_path: Path) -> None:
    found = _found(tmp_path, TRAIN.format(root="", name="MoCo"))
    assert "from a training loop at" in found[("TL305", "builder.py")]


def test_a_tail_that_does_not_define_the_name_resolves_to_nothing(tmp_path: Path) -> None:
    # `Other` is not in moco/builder.py: the monorepo's module is some other file
    found = _found(tmp_path, TRAIN.format(root="deeplearning.cross_image_ssl.", name="Other"))
    assert "from a training loop at" not in found.get(("TL305", "builder.py"), "")


def test_a_known_librarys_import_is_never_the_projects_module() -> None:
    # a project `utils/data.py` defining `DataLoader`: torch's import stays torch's
    files = [FileSummary(path, ("DataLoader", "load"), (), (), ()) for path in ("/p/utils/data.py", "/p/moco/builder.py")]
    project = Project(files)
    importer = "/p/train.py"
    assert project.function(("import", 0, "torch.utils.data.DataLoader"), importer) is None
    assert project.function(("import", 0, "fb.ssl.moco.builder.load"), importer) == ("/p/moco/builder.py", "load")
    assert project.function(("import", 0, "fb.ssl.moco.builder.missing"), importer) is None
    assert project.function(("import", 0, "fb.builder.load"), importer) is None  # a one-part tail says too little
