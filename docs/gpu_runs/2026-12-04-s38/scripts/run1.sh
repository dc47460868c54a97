#!/usr/bin/env bash
# s38 r1: the regression session 37 left unrun after G86 and its review mend (14c2f68): every GPU
# test, the five layer suites, every torch test with the emulated two-rank cases; then the MXFP8
# layer at qwen3_30b (training) and the block-scaled decode layers at dsv3_decode (MXFP8, NVFP4).
O=${OUT:-/tmp/o}; L=/tmp/s38r1; mkdir -p $O $L
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
for spec in "qwen3_30b mxfp8 train" "dsv3_decode mxfp8 infer" "dsv3_decode nvfp4 infer"; do
  set -- $spec
  timeout 90 build-gpu/dist-moe bench --shape $1 --format $2 --mode $3 --no-baseline --iters 5 --sustain-ms 100 \
    > $L/layer_$1_$2.log 2>&1
  echo "layer $1 $2 $3 rc=$? at $((SECONDS-T0)) s: $(grep -E '^BF16 layer (forward\+backward|inference)' $L/layer_$1_$2.log | tail -1)"
done
