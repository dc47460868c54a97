#!/usr/bin/env bash
# s40's first GPU run, written without a GPU (not yet run): the Mega NVFP4 decode launch (G94) --
# its GEMM-level tests against the staged sequence, the NVFP4 layer suite with the Mega cases, every
# other GPU test (the quantizer refactor into device/quant/nvfp4_rows.cuh and the L2 token-scale
# loads of the swap-AB epilogues touch the staged kernels), then Mega vs staged on the layer at
# dsv3_decode and qwen3_30b T = 128 (the staged layer alternated in the same run).
# Device time: build ~60 s, tests ~100 s, the NVFP4 suite ~80 s, two benches ~60 s.
O=${OUT:-/tmp/o}; L=/tmp/s40r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests tests/dist_moe_nvfp4_pipeline_tests tests/dist_moe_mxfp8_pipeline_tests dmoe_launch; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
# Mega first (a hang traps after the 60 s spin timeout, kSpinTimeoutNs; the timeout bounds the rest).
DMOE_COMM_TIMEOUT_MS=10000 timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Mega*' \
  > $L/mega_gemm_tests.log 2>&1
echo "mega GEMM tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/mega_gemm_tests.log | tr '\n' ' ')"
grep -E "Failure|differ|^\[  FAILED" $L/mega_gemm_tests.log | head -12
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='-Mega*' \
  > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gpu_tests.log | head -10
timeout 120 build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/nvfp4_suite.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAIL' $L/nvfp4_suite.log | head -5 | tr '\n' ' ')"
grep -E "mega" $L/nvfp4_suite.log | head -5
timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests --filter mega_inference \
  > $L/mxfp8_mega.log 2>&1
echo "mxfp8 suite (mega) rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAIL|mega' $L/mxfp8_mega.log | head -4 | tr '\n' ' ')"
for fmt in nvfp4 mxfp8; do
  for s in "dsv3_decode" "qwen3_30b --tokens 128"; do
    f=$L/layer_mega_${fmt}_$(echo $s | tr ' -' '__').log
    DMOE_EXPERIMENTAL_MEGA=1 timeout 90 build-gpu/dist-moe bench --shape $s --format $fmt --mode infer --pipeline mega \
      --no-baseline --iters 5 --sustain-ms 100 > $f 2>&1
    echo "layer $fmt $s mega rc=$?: $(grep -E '^inference forward' $f | awk '{print $3}') ms; $(grep -E '^staged layer' $f | awk '{print $4, $5}') staged/mega; $(grep -E '^BF16 layer' $f | awk '{print $4, $5}') bf16/mega"
    grep -E '^fwd:' $f | head -12
  done
done
