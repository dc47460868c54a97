#!/usr/bin/env bash
# s36 r4: the final tests of emulated peers -- the GPU tests, the emulated torch cases (the MXFP8 clamped
# case reported skipped with its reason; emulated_context_plan with the topology-maximum scratch), the
# EP2 worker twice more on its own, and what r1's failure looks like when the routing's capacity trap
# fires (diag_r2.py overflow).
O=${OUT:-/tmp/o}; L=/tmp/s36r4; mkdir -p $O $L
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
grep -E "Failure|exception|^\[  FAILED" $L/emulated.log | head -10
export PYTHONPATH=$PWD/python
timeout 200 python3 -m pytest -q -rs tests/torch/test_two_rank.py -k emulated > $L/torch_emulated.log 2>&1
echo "torch emulated rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_emulated.log)"
grep -E "^FAILED|^SKIPPED" $L/torch_emulated.log | cut -c1-200 | head -8
timeout 60 python3 docs/gpu_runs/2026-12-04-s36/scripts/diag_r2.py overflow 2 1 > $L/overflow.log 2>&1
echo "overflow rc=$?: $(grep -E 'DistMoE|^overflow' $L/overflow.log | cut -c1-220 | tr '\n' ' ')"
for i in 1 2; do
  timeout 120 python3 tests/torch/two_rank_worker.py --ranks 2 --emulate 1 --out $L/w$i > $L/worker$i.log 2>&1
  echo "worker $i rc=$? at $((SECONDS-T0)) s: $(grep -c ': ok' $L/worker$i.log) ok, $(grep -c ': FAIL' $L/worker$i.log) FAIL"
  grep -E ": FAIL|DistMoE|rror" $L/worker$i.log | head -5
done
