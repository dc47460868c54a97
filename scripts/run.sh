#!/usr/bin/env bash
# The quick-start job: build, then `dist-moe demo` (a memory plan, the CPU oracle, and GPU
# execution when an SM90 GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
exec "${BUILD_DIR:-build}/dist-moe" demo "$@"
