#!/usr/bin/env bash
# Session 26 run 5: the MXFP8 decode tiles over tile_rows (new test), the NVFP4 one after the helper
# it now shares.
O=${OUT:-/tmp/o}; mkdir -p $O
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $O/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests >> $O/build.log 2>&1 || { tail -20 $O/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmMxfp8*:GroupedGemmNvfp4Fprop*' > $O/gemm_tests.log 2>&1
echo "rc=$?"; grep -E "TileRows|^\[  FAILED|PASSED|tests ran|SKIPPED \]" $O/gemm_tests.log | tail -14
echo "done at $((SECONDS-T0)) s"
