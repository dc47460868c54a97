#!/usr/bin/env bash
# s30 r1: the FP8-blockwise consumers' promotion pattern with free operands (bench_wgmma_rate
# --promotion): cycles per k block for 4 x n64 RS slices (main's 128x256), n64 / n128 SS slices and
# the 128x128 one-slice tile, with one or two warpgroups and the second started late.
O=${OUT:-/tmp/o}; L=/tmp/s30r1; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_wgmma_rate >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 120 build-gpu/bench/bench_wgmma_rate --promotion --iters 8000 > $L/promotion.log 2>&1
echo "promotion rc=$?"; cat $L/promotion.log
