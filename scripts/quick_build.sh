#!/usr/bin/env bash
# Configure + build the named targets in $BUILD_DIR (default build-gpu) on the GPU machine, NCCL from
# the torch venv; log to $OUT/build.log (tail printed on failure). Used by one-off device commands:
#   scripts/quick_build.sh dmoe_launch bench_dispatch_combine dist_moe_gpu_tests ...   (or: all)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD_DIR=${BUILD_DIR:-build-gpu}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
LOG=${OUT:-/tmp}/build.log
mkdir -p "$(dirname "$LOG")"
export PATH=/usr/local/cuda/bin:$PATH
start=$(date +%s)
# (the python3 on PATH: the torch venv's, whose torch the extension targets build against)
if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" \
     -DPython_EXECUTABLE="$(command -v python3)" >"$LOG" 2>&1 &&
   cmake --build "$BUILD_DIR" -j "$(nproc)" --target "$@" >>"$LOG" 2>&1; then
  echo "build OK ($(( $(date +%s) - start )) s): $*"
else
  echo "build FAILED"; tail -40 "$LOG"; exit 1
fi
