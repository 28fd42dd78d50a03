"""snakeviz really serves a .prof over HTTP on 127.0.0.1 (started, fetched, stopped)."""

from __future__ import annotations

import cProfile
import urllib.request
from pathlib import Path

import pytest

from torchlint.profiler import snakeviz

pytestmark = pytest.mark.skipif(snakeviz.executable() is None, reason="snakeviz is not installed")


def _work(n: int) -> int:
    return sum(i * i for i in range(n))


@pytest.fixture
def prof(tmp_path: Path) -> Path:
    path = tmp_path / "dir with space" / "profile.prof"
    path.parent.mkdir()
    p = cProfile.Profile()
    p.runcall(_work, 10_000)
    p.dump_stats(str(path))
    return path


def test_snakeviz_serves_the_profile_on_localhost(prof):
    server = snakeviz.launch(prof, browser=False, log=prof.parent / "snakeviz.log")
    try:
        assert server.url.startswith(f"http://127.0.0.1:{server.port}/snakeviz/")
        assert server.wait_ready(timeout=30), (prof.parent / "snakeviz.log").read_text()
        with urllib.request.urlopen(server.url, timeout=10) as response:
            assert response.status == 200
            page = response.read().decode("utf-8", "replace")
        assert "snakeviz" in page.lower()
        assert "_work" in page  # the stats of this .prof are in the page
    finally:
        server.stop()
    assert server.process.poll() is not None


def test_command_binds_localhost_and_quotes_the_path(prof):
    cmd = snakeviz.command(prof, port=9999, server=True)
    assert cmd[cmd.index("-H") + 1] == "127.0.0.1"
    assert cmd[cmd.index("-p") + 1] == "9999" and "-s" in cmd
    shell = snakeviz.shell_command(cmd)
    assert f"'{prof.resolve()}'" in shell  # a path with a space stays one argument


@pytest.mark.parametrize(
    ("env", "platform", "reason"),
    [
        ({}, "linux", "no display"),
        ({"DISPLAY": ":0"}, "linux", None),
        ({"DISPLAY": ":0", "SSH_CONNECTION": "1 2 3 4"}, "linux", "SSH session"),
        ({"DISPLAY": ":0", "CI": "true"}, "linux", "CI"),
        ({}, "darwin", None),
    ],
)
def test_headless_detection(env, platform, reason):
    assert snakeviz.headless_reason(env, platform) == reason
