#!/usr/bin/env bash
# s37 r6 (G84): NVFP4 token rows from persistent CTAs with the next row in flight -- the NVFP4 GPU
# tests (quantizers, GEMMs, layer), the NVFP4 suite, test_nvfp4.py, and the quantizer table twice.
O=${OUT:-/tmp/o}; L=/tmp/s37r6; mkdir -p $O $L
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
for r in 1 2; do
  build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quant$r.log 2>&1
  echo "bench_quantize $r rc=$? at $((SECONDS-T0)) s: $(grep -E 'nvfp4_token_rows|of 32' $L/quant$r.log | grep -v '^nvfp4' | tr -s ' ' | tr '\n' ';')"
done
grep -B3 -A12 "activations (per rank" $L/quant1.log | grep -E "quantizer|nvfp4_token"
DMOE_COMM_TIMEOUT_MS=10000 timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*Nvfp4*:*NVFP4*:Quantize*:*Emulated*' > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $L/gpu_tests.log | head -10
timeout 100 build-gpu/dmoe_launch -n 1 --timeout 95 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_nvfp4.log | head -1)"
PYTHONPATH=$PWD/python timeout 120 python3 -m pytest -q tests/torch/test_nvfp4.py > $L/torch.log 2>&1
echo "torch nvfp4 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
sed -n '/^summary/,$p' $L/quant2.log | grep -E "below|of 32"
