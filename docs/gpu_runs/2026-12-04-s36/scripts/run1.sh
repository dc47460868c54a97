#!/usr/bin/env bash
# s36 r1: emulated peers (Context::create_emulated / emulate_peer_buffers) -- the new GPU tests first,
# then every GPU test, the comm suite on one GPU, the five layer suites and every torch test (the
# barrier and pushed-slot address helpers changed for every EP kernel).
O=${OUT:-/tmp/o}; L=/tmp/s36r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests dmoe_launch; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Emulated*' > $L/emulated.log 2>&1
echo "emulated rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/emulated.log | tr '\n' ' ')"
grep -E "Failure|error|Expected|Which is|summary|relL2|^\[  FAILED" $L/emulated.log | head -40
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='-Emulated*' > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_comm_tests > $L/comm.log 2>&1
echo "comm rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED|passed|ERROR' $L/comm.log | tail -2 | tr '\n' ' ')"
for t in pipeline mxfp8_pipeline fp8_blockwise_pipeline fp8_blockwise_training nvfp4_pipeline; do
  timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_${t}_tests > $L/suite_$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$t.log | head -1)"
done
PYTHONPATH=$PWD/python DMOE_COMM_TIMEOUT_MS=10000 timeout 200 python3 -m pytest -q tests/torch/test_two_rank.py -k emulated > $L/torch_emulated.log 2>&1
echo "torch emulated rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_emulated.log)"
grep -E "FAIL|Error|assert" $L/torch_emulated.log | head -20
PYTHONPATH=$PWD/python timeout 300 python3 -m pytest -q tests/torch --deselect tests/torch/test_two_rank.py > $L/torch.log 2>&1
echo "torch rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
