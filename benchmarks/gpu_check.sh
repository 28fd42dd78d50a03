#!/usr/bin/env bash
# The GPU check (issue 26): one command for a session that finds a GPU. See benchmarks/README.md.
#   bash benchmarks/gpu_check.sh               # on the device machine: writes to $OUT
#   bash benchmarks/gpu_check.sh --dry-run     # anywhere: the plumbing, no CUDA
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
exec python3 benchmarks/gpu_check.py "$@"
