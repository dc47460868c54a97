#!/usr/bin/env bash
# s28 r6: the NVFP4 row expansion at 8 stages per warp item (DMOE_QUANT_EXPERIMENTAL=1) against 4,
# alternated twice; its GPU tests under the knob.
O=${OUT:-/tmp/o}; L=/tmp/s28r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_quantize dist_moe_gpu_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
DMOE_QUANT_EXPERIMENTAL=1 timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Nvfp4ExpandRows*' > $L/tests.log 2>&1
echo "tests (8 stages) rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/tests.log | tr '\n' ' ')"
B=build-gpu/bench/bench_quantize
for i in 1 2; do
  timeout 100 $B > $L/bench_4_$i.log 2>&1; echo "4 stages run $i rc=$?"
  DMOE_QUANT_EXPERIMENTAL=1 timeout 100 $B > $L/bench_8_$i.log 2>&1; echo "8 stages run $i rc=$?"
done
for f in $L/bench_4_1.log $L/bench_8_1.log $L/bench_4_2.log $L/bench_8_2.log; do echo "$(basename $f): $(grep -E 'nvfp4_expand' $f | tail -4 | awk '{printf "%s %s %s | ", $1, $2, $NF=="below"?$(NF-1):$NF}')"; done
