#!/usr/bin/env bash
# Configure and build Dist-MoE into ${BUILD_DIR:-build}. Installs missing Debian packages when run
# as root on a Debian/Ubuntu machine. Extra CMake arguments pass through: scripts/build.sh -DX=Y.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -e /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[build] installing: ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "[build] missing packages: ${need[*]} (install them, or run as root to let this script do it)" >&2
    exit 1
  fi
fi

export PATH=/usr/local/cuda/bin:$PATH
cuda_flag=-DDIST_MOE_ENABLE_CUDA=ON
command -v nvcc >/dev/null || { echo "[build] nvcc not found: host-only build (no kernels)"; cuda_flag=-DDIST_MOE_ENABLE_CUDA=OFF; }

jobs=${JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$cuda_flag" "$@"
fi
cmake --build "$BUILD_DIR" -j "$jobs"
