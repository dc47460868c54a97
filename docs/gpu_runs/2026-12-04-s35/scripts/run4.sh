#!/usr/bin/env bash
# s35 r4: the closing check of the tree -- every GPU test, the five layer suites, every torch test, the
# examples' quick start; then layers at 384 local experts (a Kimi-K2-sized expert count on one GPU).
O=${OUT:-/tmp/o}; L=/tmp/s35r4; mkdir -p $O $L
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
timeout 200 build-gpu/tests/dist_moe_gpu_tests > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
for t in pipeline mxfp8_pipeline fp8_blockwise_pipeline fp8_blockwise_training nvfp4_pipeline; do
  timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_${t}_tests > $L/suite_$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$t.log | head -1)"
done
PYTHONPATH=$PWD/python timeout 400 python3 -m pytest -q tests/torch > $L/torch.log 2>&1
echo "torch rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
layer() {  # shape format mode experts
  timeout 120 build-gpu/dist-moe bench --shape $1 --format $2 --mode $3 --experts $4 --no-baseline --iters 3 --sustain-ms 50 > $L/layer_$1_$2_$3_$4.log 2>&1
  echo "layer $1 $2 $3 E=$4 rc=$? at $((SECONDS-T0)) s: $(grep -hE '^forward\+backward|^inference forward|BF16 layer (forward\+backward|inference)|rror' $L/layer_$1_$2_$3_$4.log | tr -s ' ' | tr '\n' '|')"
}
layer dsv3_prefill fp8_blockwise train 384
layer dsv3_prefill mxfp8 train 384
layer dsv3_decode nvfp4 infer 384
layer dsv3_decode fp8_blockwise infer 384
