#!/usr/bin/env bash
# s28 r3: the rows + columns region pick fitted to r2's sweep; bench_quantize --regions --streams
# (coalesced 1:2 streaming kernel, one orientation at a time, the training weight's regions).
O=${OUT:-/tmp/o}; L=/tmp/s28r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_quantize dist_moe_gpu_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 300 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*' > $L/tests.log 2>&1
echo "tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/tests.log | tr '\n' ' ') at $((SECONDS-T0)) s"
B=build-gpu/bench/bench_quantize
timeout 300 $B --regions --streams > $L/bench_regions.log 2>&1; echo "bench --regions rc=$? at $((SECONDS-T0)) s"
grep -A6 -E "streaming kernels|one orientation" $L/bench_regions.log
grep -A17 -E "mxfp8_w_train_t by region" $L/bench_regions.log
tail -30 $L/bench_regions.log
