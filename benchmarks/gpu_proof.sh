#!/usr/bin/env bash
# The GPU proof in one command (CUDA tests, bench_gpu.py, calibrate, memory benchmark);
# the steps, limits and reports are described in benchmarks/gpu_proof.py.
#   bash benchmarks/gpu_proof.sh                  # writes reports/gpu.md, gpu.json, ...
#   bash benchmarks/gpu_proof.sh --copy-to "$OUT" # and copies them to $OUT after each step
#   bash benchmarks/gpu_proof.sh --dry-run        # the plan only
# Exit status 2 (before any work) without an NVIDIA GPU; 1 when a step failed.
set -euo pipefail
cd "$(dirname "$0")/.."
unset NUMBA_ENABLE_CUDASIM  # the proof runs on the GPU, never in the simulator
PYTHON=${PYTHON:-$(command -v python3 || command -v python || true)}
[ -n "$PYTHON" ] || { echo "gpu_proof: no python3 or python on PATH" >&2; exit 1; }
exec "$PYTHON" benchmarks/gpu_proof.py "$@"
