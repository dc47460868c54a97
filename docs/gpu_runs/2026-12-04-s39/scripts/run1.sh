#!/usr/bin/env bash
# s39 r1: (1) the block-scaled decode GEMMs' new benchmark rows (bench_grouped_gemm at decode: MXFP8,
# NVFP4 packed and expanded, FP8 blockwise, each beside our BF16 pick) at dsv3_decode and qwen3_30b
# T = 128 / 512; (2) G91: NVFP4 decode on expanded token rows (the 16-token tile without producer
# warps) -- its GEMM rows in (1), the layer A/B (DMOE_GEMM_EXPERIMENTAL=1 expands decode contexts);
# (3) the GEMM tests of the new kernels and s38's unrun swap-AB DGRAD test; the NVFP4 suite A and B.
O=${OUT:-/tmp/o}; L=/tmp/s39r1; mkdir -p $O $L
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
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmNvfp4*:Nvfp4ExpandRows*:GroupedGemmFp8.Decode*:GroupedGemmArgs*' > $L/gemm_tests.log 2>&1
echo "gemm tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gemm_tests.log | head -10
G="build-gpu/bench/bench_grouped_gemm --ep 1 --routing random --rounds 3 --sustain-ms 100"
timeout 150 $G --shapes dsv3_decode --sweep > $L/gg_dsv3_decode.log 2>&1; echo "gg dsv3_decode rc=$? at $((SECONDS-T0)) s"
lay() { timeout 60 build-gpu/dist-moe bench --format nvfp4 --mode infer --no-baseline --iters 5 --sustain-ms 100 "$@"; }
n=0
for arm in A B A B; do
  n=$((n+1)); if [ $arm = B ]; then export DMOE_GEMM_EXPERIMENTAL=1; else unset DMOE_GEMM_EXPERIMENTAL; fi
  f=$L/layer_dsv3_${n}_${arm}.log; lay --shape dsv3_decode > $f 2>&1
  echo "layer dsv3_decode nvfp4 $arm rc=$?: $(grep -E '^inference forward' $f | head -1) | $(grep -E '^BF16 layer' $f | head -1)"
  grep -E '^fwd:(w13|w2|expand_x_rows|expand_h2_rows|gather_x_rows|quantize_h2) ' $f | awk '{printf "   %s %s", $1, $2} END {print ""}'
done
unset DMOE_GEMM_EXPERIMENTAL
for t in 128 512; do
  timeout 100 $G --shapes qwen3_30b --tokens $t > $L/gg_qwen3_t$t.log 2>&1; echo "gg qwen3 T=$t rc=$? at $((SECONDS-T0)) s"
done
for arm in A B; do
  if [ $arm = B ]; then export DMOE_GEMM_EXPERIMENTAL=1; else unset DMOE_GEMM_EXPERIMENTAL; fi
  f=$L/layer_qwen3_t128_${arm}.log; lay --shape qwen3_30b --tokens 128 > $f 2>&1
  echo "layer qwen3 T=128 nvfp4 $arm rc=$?: $(grep -E '^inference forward' $f | head -1) | $(grep -E '^BF16 layer' $f | head -1)"
  grep -E '^fwd:(w13|w2|expand_x_rows|expand_h2_rows|gather_x_rows|quantize_h2) ' $f | awk '{printf "   %s %s", $1, $2} END {print ""}'
done
for arm in A B; do
  if [ $arm = B ]; then export DMOE_GEMM_EXPERIMENTAL=1; else unset DMOE_GEMM_EXPERIMENTAL; fi
  timeout 100 build-gpu/dmoe_launch -n 1 --timeout 95 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4_$arm.log 2>&1
  echo "nvfp4 suite $arm rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_nvfp4_$arm.log | head -1)"
done
unset DMOE_GEMM_EXPERIMENTAL
echo "--- decode GEMM rows ---"
for f in $L/gg_dsv3_decode.log $L/gg_qwen3_t128.log $L/gg_qwen3_t512.log; do grep -E "^bs |^dsv3_decode|^qwen3" $f | grep -v sweep | cut -c1-200; done
