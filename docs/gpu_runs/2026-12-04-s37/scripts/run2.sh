#!/usr/bin/env bash
# s37 r2 (G82): the MXFP8 compact column bundles' scales token-block-major [R/32, C]. The quantizer,
# dequantizer and fused-dxy tests, the MXFP8 GPU tests and layer suite, the MXFP8 torch tests and
# the training loop, then bench_quantize (--layouts: both layouts side by side) and the MXFP8
# training layer at qwen3_30b next to our BF16 layer.
O=${OUT:-/tmp/o}; L=/tmp/s37r2; mkdir -p $O $L
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
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*:Mxfp8*:*MXFP8*:*Mxfp8*' > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|^\[  FAILED" $L/gpu_tests.log | head -30
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests > $L/suite_mxfp8.log 2>&1
echo "mxfp8 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mxfp8.log | head -1)"
PYTHONPATH=$PWD/python timeout 300 python3 -m pytest -q tests/torch/test_mxfp8.py tests/torch/test_training_loop.py tests/torch/test_checkpointing.py > $L/torch.log 2>&1
echo "torch rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
for r in 1 2; do
  build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --layouts --iters 20 --sustain-ms 100 > $L/quant$r.log 2>&1
  echo "bench_quantize $r rc=$? at $((SECONDS-T0)) s"
done
grep -A11 "scale layouts" $L/quant1.log
for r in 1 2; do echo "== run $r summary"; sed -n '/^summary/,$p' $L/quant$r.log | head -40; done
timeout 200 build-gpu/dist-moe bench --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100 > $L/layer_qwen3.log 2>&1
echo "layer rc=$? at $((SECONDS-T0)) s"; tail -25 $L/layer_qwen3.log
