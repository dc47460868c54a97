#!/usr/bin/env bash
# s37 r5: the closing check of the final tree -- every GPU test (emulated peers included), the five
# layer suites (the recompute block's opening is one helper now: begin_recompute), every torch test
# with the emulated two-rank cases (create_context's emulated and real paths share one native call),
# and the quantizer table once more.
O=${OUT:-/tmp/o}; L=/tmp/s37r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests dmoe_launch bench/bench_quantize; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
DMOE_COMM_TIMEOUT_MS=10000 timeout 170 build-gpu/tests/dist_moe_gpu_tests > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gpu_tests.log | head -10
for t in pipeline mxfp8_pipeline fp8_blockwise_pipeline fp8_blockwise_training nvfp4_pipeline; do
  timeout 100 build-gpu/dmoe_launch -n 1 --timeout 95 -- build-gpu/tests/dist_moe_${t}_tests > $L/suite_$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$t.log | head -1)"
done
PYTHONPATH=$PWD/python timeout 150 python3 -m pytest -q tests/torch --deselect tests/torch/test_two_rank.py > $L/torch.log 2>&1
echo "torch rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
PYTHONPATH=$PWD/python DMOE_COMM_TIMEOUT_MS=10000 timeout 120 python3 -m pytest -q tests/torch/test_two_rank.py -k emulated > $L/torch_emulated.log 2>&1
echo "torch emulated rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_emulated.log)"
build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quant.log 2>&1
echo "bench_quantize rc=$? at $((SECONDS-T0)) s"
sed -n '/^summary/,$p' $L/quant.log
