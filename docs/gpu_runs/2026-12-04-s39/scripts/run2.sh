#!/usr/bin/env bash
# s39 r2: G91 made the default (decode-sized NVFP4 contexts expand their tokens), the expansion and
# the h2 quantization skipping each expert's padding rows, and G92 (the TMA thread pulls each
# tile's weight scales into L2; A = without, B = with, DMOE_GEMM_EXPERIMENTAL=1): every GPU test,
# the NVFP4 suite and torch tests, the decode GEMM rows A/B and the layer A/B at dsv3_decode and
# qwen3_30b T = 128.
O=${OUT:-/tmp/o}; L=/tmp/s39r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests dmoe_launch bench/bench_grouped_gemm; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
lay() { timeout 60 build-gpu/dist-moe bench --format nvfp4 --mode infer --no-baseline --iters 5 --sustain-ms 100 "$@"; }
stages() { grep -E '^fwd:(w13|w2|expand_x_rows|expand_h2_rows|gather_x_rows|quantize_h2) ' $1 | head -6 | awk '{printf "   %s %s", $1, $2} END {print ""}'; }
n=0
for arm in A B A B; do
  n=$((n+1)); if [ $arm = B ]; then export DMOE_GEMM_EXPERIMENTAL=1; else unset DMOE_GEMM_EXPERIMENTAL; fi
  f=$L/layer_dsv3_${n}_${arm}.log; lay --shape dsv3_decode > $f 2>&1
  echo "layer dsv3_decode $arm rc=$?: $(grep -E '^inference forward' $f | awk '{print $3}') ms, $(grep -E '^BF16 layer' $f | awk '{print $4, $5}')"; stages $f
done
for arm in A B; do
  if [ $arm = B ]; then export DMOE_GEMM_EXPERIMENTAL=1; else unset DMOE_GEMM_EXPERIMENTAL; fi
  f=$L/layer_qwen3_t128_${arm}.log; lay --shape qwen3_30b --tokens 128 > $f 2>&1
  echo "layer qwen3 T=128 $arm rc=$?: $(grep -E '^inference forward' $f | awk '{print $3}') ms, $(grep -E '^BF16 layer' $f | awk '{print $4, $5}')"; stages $f
  timeout 80 build-gpu/bench/bench_grouped_gemm --ep 1 --routing random --rounds 3 --sustain-ms 100 --shapes dsv3_decode,qwen3_30b --tokens 128 \
    --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x > $L/gg_$arm.log 2>&1
  echo "gg $arm rc=$?:"; grep -E "^bs .*pick" $L/gg_$arm.log | awk '{print "  ", $2, $4, $7, "ms", $15, "of copy, bf16", $18, "ms"}'
done
unset DMOE_GEMM_EXPERIMENTAL
echo "A/B done at $((SECONDS-T0)) s"
DMOE_COMM_TIMEOUT_MS=10000 timeout 200 build-gpu/tests/dist_moe_gpu_tests > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|nvfp4_expand_rows" $L/gpu_tests.log | head -10
timeout 100 build-gpu/dmoe_launch -n 1 --timeout 95 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_nvfp4.log | head -1)"
PYTHONPATH=$PWD/python timeout 150 python3 -m pytest -q tests/torch/test_nvfp4.py tests/torch/test_prepare.py > $L/torch_nvfp4.log 2>&1
echo "torch nvfp4 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_nvfp4.log)"
