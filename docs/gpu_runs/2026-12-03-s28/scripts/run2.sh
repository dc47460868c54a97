#!/usr/bin/env bash
# s28 r2: bench_quantize --regions (both rows + columns quantizers at every region shape) and the
# NVFP4 weight quantizer's L2-reuse arm (DMOE_QUANT_EXPERIMENTAL=1: quantize pass backwards over its
# expert, evict-first loads, lag = chunks + half a wave), its bitwise tests under the knob.
O=${OUT:-/tmp/o}; L=/tmp/s28r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_quantize dist_moe_gpu_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
DMOE_QUANT_EXPERIMENTAL=1 timeout 300 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:Nvfp4ExpandRows*' > $L/tests_exp.log 2>&1
echo "tests (knob on) rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/tests_exp.log | tr '\n' ' ') at $((SECONDS-T0)) s"
timeout 300 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Nvfp4ExpandRows*:QuantizeNvfp4*' > $L/tests_off.log 2>&1
echo "tests (knob off) rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/tests_off.log | tr '\n' ' ')"
B=build-gpu/bench/bench_quantize
timeout 300 $B --regions --streams > $L/bench_regions.log 2>&1; echo "bench --regions rc=$? at $((SECONDS-T0)) s"
DMOE_QUANT_EXPERIMENTAL=1 timeout 200 $B > $L/bench_exp.log 2>&1; echo "bench exp rc=$? at $((SECONDS-T0)) s"
grep -A11 -E "by region|streaming kernels" $L/bench_regions.log
echo "--- knob off / on"
grep -E "nvfp4_w |nvfp4_expand" $L/bench_regions.log $L/bench_exp.log | grep -v "^.*summary"
