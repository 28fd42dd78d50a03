"""The GPU check's steps (benchmarks/gpu_check.py runs them, in order of value).

Each step takes the :class:`Kit` and returns its result: a ``verdict`` (PASS, FAIL,
ERROR, SKIPPED, "not run", or DRY for a dry run's plumbing), a ``why`` and its figures.
Every command runs in its own process group under what is left of the deadline, and
its output goes to ``log.txt``; a step that overruns is stopped, not waited for.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU_SCRIPTS = ROOT / "fixtures" / "scripts" / "gpu"
SMALL_FIXTURE = ROOT / "fixtures" / "scripts" / "gpu_syncs.py"
BLOCK_FIXTURE = ROOT / "fixtures" / "scripts" / "block_syncs.py"  # 24 reads a step at one line, 1 at another
DDP_SCRIPT = ROOT / "fixtures" / "scripts" / "ddp_train.py"
#: runs.tar.gz stays under the device tool's 16 MiB a file: traces go in while they fit
PACK_LIMIT = 14 * 1024 * 1024
#: seconds kept back at the end for packing and writing the summary
RESERVE_S = 15.0

FACTS = r"""
import json, os, platform, subprocess, sys
out = {"python": platform.python_version(), "executable": sys.executable, "cpus": os.cpu_count()}
try:
    import torch
    out.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda=torch.cuda.is_available())
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if out["cuda"]:
        out["device_count"] = torch.cuda.device_count()
        out["devices"] = [{"name": torch.cuda.get_device_name(i),
                           "capability": "%d.%d" % torch.cuda.get_device_capability(i),
                           "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
                          for i in range(out["device_count"])]
    else:
        out["device_count"] = 0
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20)
    out["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    out["driver"] = smi.stdout.split(",")[1].strip() if smi.returncode == 0 and "," in smi.stdout else None
except Exception as exc:
    out["nvidia_smi"] = f"not available ({type(exc).__name__})"
print(json.dumps(out))
"""


class Kit:
    """The run's state: where things go, the deadline, the results so far."""

    def __init__(self, *, out: Path, work: Path, dry: bool, deadline_s: float, wheels: Path, smoke: bool = True) -> None:
        self.out, self.work, self.dry, self.wheels, self.smoke = out, work, dry, wheels, smoke
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s
        self.site: Path | None = None  # wheels installed with --target, when the environment refused them
        self.writer: Callable[[Kit], None] | None = None  # writes summary.md and gpu_check.json (gpu_check.py)
        self.results: dict[str, Any] = {
            "kit": "torchlint benchmarks/gpu_check.py", "dry_run": dry, "deadline_s": deadline_s,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "facts": {}, "steps": {},
        }
        (out / "log.txt").write_text("", encoding="utf-8")

    # -- time ---------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        return self.deadline - time.monotonic() - RESERVE_S

    # -- processes ----------------------------------------------------------

    def log(self, text: str) -> None:
        with open(self.out / "log.txt", "a", encoding="utf-8") as f:
            f.write(f"[{self.elapsed():6.1f}s] {text}\n")

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        paths = [str(self.site)] if self.site else []
        paths += [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env.pop("DISPLAY", None)
        return env

    def run(self, cmd: list[str], *, timeout: float, cwd: Path = ROOT, tee: Path | None = None,
            env: dict[str, str] | None = None) -> dict[str, Any]:
        """Run ``cmd`` in its own process group; on timeout the whole group is stopped."""
        timeout = max(min(timeout, self.remaining()), 1.0)
        self.log(f"$ {' '.join(cmd)}  (cwd {cwd}, timeout {timeout:.0f}s)")
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env or self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop_group(proc)
            output, _ = proc.communicate()
        wall = time.perf_counter() - t0
        with open(self.out / "log.txt", "a", encoding="utf-8") as f:
            f.write(output or "")
            f.write(f"\n[exit {proc.returncode}{' TIMEOUT' if timed_out else ''} after {wall:.1f}s]\n")
        if tee is not None:
            tee.write_text(output or "", encoding="utf-8")
        return {"rc": proc.returncode, "output": output or "", "wall_s": wall, "timed_out": timed_out}

    def python(self, *args: str, **kw: Any) -> dict[str, Any]:
        return self.run([sys.executable, *args], **kw)

    def progress(self, step: str, partial: dict[str, Any]) -> None:
        """A step's results so far, written out: a run stopped at its limit keeps them."""
        self.results["steps"][step] = {"verdict": "running", **partial}
        if self.writer is not None:
            self.writer(self)

    # -- steps --------------------------------------------------------------

    def run_step(self, name: str, step: Callable[[Kit], dict[str, Any]]) -> None:
        if self.remaining() < 5:
            self.results["steps"][name] = {"verdict": "not run", "why": "the kit's deadline was reached"}
            return
        self.log(f"== step {name}")
        t0 = time.perf_counter()
        try:
            result = step(self)
        except Exception as exc:  # one broken step never stops the others
            result = {"verdict": "ERROR", "why": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            self.log(result["traceback"])
        result["wall_s"] = time.perf_counter() - t0
        self.results["steps"][name] = result

    def pack_runs(self) -> None:
        """runs.tar.gz: each run's reports, experiment and session, then traces while they fit."""
        runs = self.work / "runs"
        if not runs.is_dir():
            return
        small = [p for p in sorted(runs.rglob("*")) if p.is_file() and p.suffix in (".json", ".txt", ".log")
                 and "traces" not in p.parts]
        traces = sorted((p for p in runs.rglob("*.pt.trace.json")), key=lambda p: p.stat().st_size)
        size = sum(p.stat().st_size for p in small)
        chosen = list(small)
        for p in traces:
            if size + p.stat().st_size > 4 * PACK_LIMIT:  # traces compress about 5-10x
                break
            chosen.append(p)
            size += p.stat().st_size
        tmp = self.out / "runs.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for p in chosen:
                tar.add(p, arcname=str(p.relative_to(self.work)))
        if tmp.stat().st_size > PACK_LIMIT:  # too big with the traces: the reports alone
            with tarfile.open(tmp, "w:gz") as tar:
                for p in small:
                    tar.add(p, arcname=str(p.relative_to(self.work)))
        os.replace(tmp, self.out / "runs.tar.gz")


def _stop_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# --------------------------------------------------------------------------
# 0. wheels and facts
# --------------------------------------------------------------------------


def _wheels(kit: Kit) -> dict[str, Any]:
    found = sorted(p.name for p in kit.wheels.glob("*.whl")) if kit.wheels.is_dir() else []
    libcst = [w for w in found if w.lower().startswith("libcst-") and "cp312" in w and "x86_64" in w]
    have = kit.python("-c", "import libcst; print(libcst.__file__)", timeout=60)
    info: dict[str, Any] = {"folder": str(kit.wheels), "wheels": found, "libcst_here": have["rc"] == 0}
    if kit.dry:
        info["ok"] = bool(libcst)
        info["why"] = (f"a cp312 x86-64 libcst wheel is in {kit.wheels.name}/" if libcst else
                       f"no cp312 x86-64 libcst wheel in {kit.wheels}: run `bash benchmarks/gpu_wheels.sh` here first")
        return info
    if have["rc"] == 0:
        info.update(ok=True, why="libcst was already installed")
        return info
    if not found:
        info.update(ok=False, why=f"libcst is missing and {kit.wheels} holds no wheels (carry .gpu-wheels)")
        return info
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(kit.wheels),
           "--disable-pip-version-check"]
    res = kit.run([*pip, "libcst"], timeout=120)
    if res["rc"] != 0:  # an environment that refuses installs: a folder of our own on PYTHONPATH
        kit.site = kit.work / "site"
        res = kit.run([*pip, "--target", str(kit.site), "libcst"], timeout=120)
        sys.path.insert(0, str(kit.site))
    check = kit.python("-c", "import libcst; print(libcst.__version__ if hasattr(libcst, '__version__') else 'ok')",
                       timeout=60)
    info.update(ok=check["rc"] == 0, why="installed from the wheel folder" if check["rc"] == 0 else
                f"libcst could not be installed: {res['output'][-500:]}", target=str(kit.site) if kit.site else None)
    return info


def _facts(kit: Kit) -> dict[str, Any]:
    facts: dict[str, Any] = {"commit": _commit(), "sources": _tree_digest()}
    if kit.dry:
        from importlib import metadata

        try:
            facts["torch"] = metadata.version("torch")
        except metadata.PackageNotFoundError:
            facts["torch"] = None
        facts.update(python=sys.version.split()[0], cuda="not queried (dry run)", device_count=0)
        return facts
    res = kit.python("-c", FACTS, timeout=120)
    try:
        facts.update(json.loads(res["output"].strip().splitlines()[-1]))
    except (ValueError, IndexError):
        facts["error"] = res["output"][-1000:]
    return facts


def _tree_digest() -> str:
    """A digest of torchlint's sources: names the version where the copy has no git history."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted((ROOT / "torchlint").rglob("*.py")):
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip()[:100] or "unknown (no git history here)"
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git here)"


def step_setup(kit: Kit) -> dict[str, Any]:
    wheels = _wheels(kit)
    facts = _facts(kit)
    kit.results["facts"] = facts
    result: dict[str, Any] = {"wheels": wheels}
    if kit.dry:
        result.update(verdict="DRY" if wheels["ok"] else "FAIL", why=wheels["why"])
    elif not facts.get("cuda"):
        result.update(verdict="FAIL", stop=True,
                      why="no CUDA device here: nothing to measure (a CPU checks the kit with --dry-run)")
    else:
        result.update(verdict="PASS" if wheels["ok"] else "FAIL", why=wheels["why"])
    return result


# --------------------------------------------------------------------------
# 1. pytest -m gpu
# --------------------------------------------------------------------------


def gpu_test_files() -> list[str]:
    """The test modules that use the ``gpu`` marker. ``pytest -m gpu`` is given these alone:
    collecting every module would import what the device machine lacks (jsonschema, pygls),
    and one collection error stops the whole run."""
    return sorted(str(p) for p in (ROOT / "tests").glob("test_*.py") if "mark.gpu" in p.read_text(encoding="utf-8"))


def step_pytest(kit: Kit) -> dict[str, Any]:
    base = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider"]
    marked = gpu_test_files()
    if kit.dry:
        res = kit.run([*base, "--collect-only", "-q", *marked], timeout=120)
        tests = [line for line in res["output"].splitlines() if "::" in line]
        return {"verdict": "DRY" if res["rc"] == 0 and tests else "FAIL", "collected": tests,
                "why": f"{len(tests)} gpu-marked tests collected (not run: no CUDA)"}
    xml = kit.work / "pytest-gpu.xml"
    res = kit.run([*base, "-q", "-rA", f"--junitxml={xml}", *marked], timeout=min(240.0, kit.remaining() * 0.45),
                  tee=kit.out / "pytest-gpu.txt")
    counts = _junit_counts(xml)
    failed = [line for line in res["output"].splitlines() if line.startswith(("FAILED", "ERROR"))]
    verdict = "PASS" if res["rc"] == 0 else "FAIL"
    why = _pytest_line(res["output"]) or f"exit {res['rc']}"
    if res["timed_out"]:
        why = "stopped at its time limit: " + why
    return {"verdict": verdict, "why": why, "counts": counts, "failed": failed[:20]}


def _junit_counts(xml: Path) -> dict[str, int]:
    try:
        text = xml.read_text(encoding="utf-8")
    except OSError:
        return {}
    m = re.search(r"<testsuite [^>]*", text)
    if not m:
        return {}
    return {k: int(v) for k, v in re.findall(r'\b(tests|failures|errors|skipped)="(\d+)"', m.group(0))}


def _pytest_line(output: str) -> str | None:
    for line in reversed(output.splitlines()):
        if re.search(r"\d+ (passed|failed|skipped|error|deselected)", line):
            return line.strip("= ").strip()
    return None


# --------------------------------------------------------------------------
# 3. micro-benchmarks
# --------------------------------------------------------------------------


def step_micro(kit: Kit) -> dict[str, Any]:
    out = kit.work / "micro.json"
    cmd = [str(ROOT / "benchmarks" / "gpu_micro.py"), "--json", str(out)]
    if kit.dry:
        if not kit.smoke:
            return {"verdict": "DRY", "why": "smoke run skipped (--no-smoke)"}
        res = kit.python(*cmd, "--smoke", timeout=120, env={**kit.env(), "OMP_NUM_THREADS": "1"})
    else:
        budget = max(min(100.0, kit.remaining() - 150), 20.0)  # leave the savings step its share
        res = kit.python(*cmd, "--budget-s", f"{budget:.0f}", timeout=budget + 60)
    data = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    errors = data.get("errors") or {}
    results = data.get("results") or []
    if kit.dry:
        ok = res["rc"] == 0 and not errors and results
        return {"verdict": "DRY" if ok else "FAIL", "errors": errors, "benchmarks": [r["key"] for r in results],
                "why": f"{len(results)} benchmarks ran at tiny sizes on the CPU (their code, no figure)" if ok else
                f"smoke run failed (exit {res['rc']}): {list(errors) or res['output'][-800:]}"}
    return {"verdict": "PASS" if not errors and results and res["rc"] == 0 else "FAIL", "results": results,
            "errors": errors, "not_run": data.get("not_run", []),
            "why": f"{len(results)} benchmarks" + (f", errors in {', '.join(errors)}" if errors else "")
            + (" (stopped at its time limit)" if res["timed_out"] else "")}


# --------------------------------------------------------------------------
# 4. savings on CUDA: experiment vs A/B truth;  5. two GPUs
# --------------------------------------------------------------------------


def step_savings(kit: Kit) -> dict[str, Any]:
    from gpu_profile import scripts_dir
    from gpu_truth import savings_rows

    return savings_rows(kit, scripts_dir(kit))


def step_nproc2(kit: Kit) -> dict[str, Any]:
    if kit.dry:
        return {"verdict": "SKIPPED", "why": "dry run (the option is checked in the profile step)"}
    count = int(kit.results["facts"].get("device_count") or 0)
    if count < 2:
        return {"verdict": "SKIPPED", "why": f"{count} GPU here: --nproc-per-node 2 needs two"}
    name = "ddp-nproc2"
    cmd = [sys.executable, "-m", "torchlint", "profile", "--nproc-per-node", "2", "--no-browser", "--output-format",
           "json", "--out", str(kit.work / "runs" / name), str(DDP_SCRIPT), "--cuda", "--steps", "20"]
    res = kit.run(cmd, timeout=180)
    from gpu_profile import digest_run

    entry = digest_run(kit.work / "runs" / name, res)
    return {"verdict": entry["verdict"], "why": entry.get("why") or "both ranks reported", "run": entry}


def step_profile(kit: Kit) -> dict[str, Any]:
    from gpu_profile import profile_runs

    return profile_runs(kit)


STEPS: list[tuple[str, Callable[[Kit], dict[str, Any]]]] = [
    ("setup", step_setup),
    ("pytest", step_pytest),
    ("profile", step_profile),
    ("micro", step_micro),
    ("savings", step_savings),
    ("nproc2", step_nproc2),
]
