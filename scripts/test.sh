#!/usr/bin/env bash
# Build, then run the CPU test suites (what CI runs). With --gpu, also the GPU suites (SM90 only).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
labels=(-LE gpu)
if [ "${1:-}" = "--gpu" ]; then labels=(); shift; fi
scripts/build.sh "$@"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" "${labels[@]}"
