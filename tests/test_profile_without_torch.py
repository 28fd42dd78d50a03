"""`torchlint profile` where torch is not installed refuses up front, in one line that says
how to install it, exit 2: it never runs the script only to report "0 optimizer steps"."""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _without_torch(tmp_path: Path) -> Path:
    """A directory holding every package of this environment but torch (links), for a
    Python started with -S (no site-packages of its own)."""
    packages = tmp_path / "site"
    packages.mkdir()
    for directory in site.getsitepackages():
        for entry in Path(directory).iterdir():
            if entry.name.startswith(("torch", "functorch")) or entry.suffix == ".pth" or (packages / entry.name).exists():
                continue
            (packages / entry.name).symlink_to(entry)
    return packages


def test_profile_without_torch_says_how_to_install_it_and_runs_nothing(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    ran = tmp_path / "ran"
    script.write_text(f"open({str(ran)!r}, 'w').close()\nimport torch\n")
    env = {"PYTHONPATH": f"{ROOT}:{_without_torch(tmp_path)}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    assert subprocess.run([sys.executable, "-S", "-c", "import torch"], env=env, capture_output=True).returncode != 0
    done = subprocess.run([sys.executable, "-S", "-m", "torchlint", "profile", "--no-browser", str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("torchlint: error: `profile` needs torch") and "pip install torch==2.13.0" in line and "torchlint[profile]" in line
    assert done.stdout == "" and not ran.exists() and not list(tmp_path.glob("torchlint-*"))
    # Near miss: `check` never needs torch.
    checked = subprocess.run([sys.executable, "-S", "-m", "torchlint", "check", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_pin_in_the_message_is_the_readme_s() -> None:
    from torchlint.cli.profile import PINNED_TORCH

    assert f"pip install torch=={PINNED_TORCH} --index-url https://download.pytorch.org/whl/cpu" in (ROOT / "README.md").read_text()
