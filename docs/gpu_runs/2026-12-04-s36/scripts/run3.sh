#!/usr/bin/env bash
# s36 r3: the emulated GPU tests (+ MXFP8 clamped + RMSNorm); whether r1's one-time fault of the emulated
# EP2 torch worker repeats (the worker four times, its own output kept); the MXFP8 clamped case's
# error on its data at one real rank, against the torch model of the recipe.
O=${OUT:-/tmp/o}; L=/tmp/s36r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 DMOE_COMM_TIMEOUT_MS=10000
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
[ -x build-gpu/tests/dist_moe_gpu_tests ] || { echo "build failed"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*Emulated*' > $L/emulated.log 2>&1
echo "emulated rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/emulated.log | tr '\n' ' ')"
grep -E "Failure|exception|Expected|Which is|relL2|^\[  FAILED" $L/emulated.log | head -20
export PYTHONPATH=$PWD/python
timeout 90 python3 docs/gpu_runs/2026-12-04-s36/scripts/diag_r2.py clamped 1 0 > $L/clamped.log 2>&1
echo "rc=$?"; grep -E "^clamped|Error" $L/clamped.log
for i in 1 2 3 4; do
  timeout 120 python3 tests/torch/two_rank_worker.py --ranks 2 --emulate 1 --out $L/w$i > $L/worker$i.log 2>&1
  echo "worker $i rc=$? at $((SECONDS-T0)) s: $(grep -c ': ok' $L/worker$i.log) ok, $(grep -c ': FAIL' $L/worker$i.log) FAIL"
  grep -E ": FAIL|DistMoE|rror" $L/worker$i.log | head -5
done
