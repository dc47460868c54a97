#!/usr/bin/env bash
# s37 r7 (G86): MXFP8 row scales as k-block-major words where the rows + columns quantizers write
# them (the layer's x, h2, grad_h3 and dxy row bundles), read so by the MXFP8 GEMMs -- the quantizer,
# MXFP8 GEMM and emulated GPU tests, the MXFP8 suite, test_mxfp8.py, the quantizer table.
O=${OUT:-/tmp/o}; L=/tmp/s37r7; mkdir -p $O $L
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
DMOE_COMM_TIMEOUT_MS=10000 timeout 90 build-gpu/tests/dist_moe_gpu_tests \
  --gtest_filter='Quantize*:SwigluBackwardQuantize*:*Mxfp8*:*MXFP8*:*Emulated*' > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $L/gpu_tests.log | head -10
timeout 60 build-gpu/dmoe_launch -n 1 --timeout 55 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests > $L/suite_mxfp8.log 2>&1
echo "mxfp8 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mxfp8.log | head -1)"
PYTHONPATH=$PWD/python timeout 80 python3 -m pytest -q tests/torch/test_mxfp8.py > $L/torch.log 2>&1
echo "torch mxfp8 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quant.log 2>&1
echo "bench_quantize rc=$? at $((SECONDS-T0)) s"
sed -n '/^summary/,$p' $L/quant.log | grep -E "mxfp8_rows|fused|of 32"
