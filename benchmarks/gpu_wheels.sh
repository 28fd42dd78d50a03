#!/usr/bin/env bash
# Download, here (where pip reaches PyPI), the wheels the GPU kit installs on the device
# machine (python 3.12, x86-64, no network): libcst and what it needs, into the
# git-ignored folder .gpu-wheels/ that the device call carries (benchmarks/README.md).
#
#   bash benchmarks/gpu_wheels.sh            # libcst (+ pyyaml, its one requirement)
#   WITH_SNAKEVIZ=1 bash benchmarks/gpu_wheels.sh   # also snakeviz + tornado (optional)
#
# The machine already has click, rich, pathspec, pytest, hypothesis and torch.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu-wheels
mkdir -p "$dest"
# The version this checkout is tested with: the project's venv first (the system python3 may
# hold an old libcst the index no longer serves), then python3; else the newest.
py=python3
if [ -x .venv/bin/python ]; then
    py=.venv/bin/python
fi
libcst=$("$py" -c 'import importlib.metadata as m; print("libcst==" + m.version("libcst"))' 2>/dev/null || echo libcst)
wanted=("$libcst")
if [ "${WITH_SNAKEVIZ:-0}" = 1 ]; then
    wanted+=(snakeviz)
fi
# pip matches each manylinux tag exactly: name the ones a cp312 wheel of these may carry.
"$py" -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any \
    -d "$dest" "${wanted[@]}"
# Keep one version of each package (two would stop the install there).
python3 - "$dest" <<'EOF'
import collections, pathlib, sys
wheels = collections.defaultdict(list)
for w in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    wheels[w.name.split("-")[0].lower()].append(w)
for name, ws in wheels.items():
    if len(ws) > 1:
        sys.exit(f"two versions of {name} in {sys.argv[1]}: {', '.join(w.name for w in ws)}; remove one")
print("wheels for the device machine:", ", ".join(sorted(w.name for ws in wheels.values() for w in ws)))
EOF
du -sh "$dest"
