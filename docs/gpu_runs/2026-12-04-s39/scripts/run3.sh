#!/usr/bin/env bash
# s39 r3: G93, staggered consumer warpgroups for the NVFP4 decode tiles (A = without, B = with,
# DMOE_GEMM_EXPERIMENTAL=1): the NVFP4 GEMM tests and suite under B, the decode GEMM rows and the layer
# alternated at dsv3_decode and qwen3_30b T = 128 / 512.
O=${OUT:-/tmp/o}; L=/tmp/s39r3; mkdir -p $O $L
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
DMOE_GEMM_EXPERIMENTAL=1 timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmNvfp4*' > $L/gemm_tests_B.log 2>&1
echo "nvfp4 gemm tests (B) rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests_B.log | tr '\n' ' ')"
DMOE_GEMM_EXPERIMENTAL=1 timeout 100 build-gpu/dmoe_launch -n 1 --timeout 95 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4_B.log 2>&1
echo "nvfp4 suite (B) rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_nvfp4_B.log | head -1)"
lay() { timeout 60 build-gpu/dist-moe bench --format nvfp4 --mode infer --no-baseline --iters 5 --sustain-ms 100 "$@"; }
stages() { grep -E '^fwd:(w13|w2) ' $1 | head -2 | awk '{printf "   %s %s", $1, $2} END {print ""}'; }
gg() { timeout 90 build-gpu/bench/bench_grouped_gemm --ep 1 --routing random --rounds 3 --sustain-ms 100 "$@"; }
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
  gg --shapes dsv3_decode,qwen3_30b --tokens 128 --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x,w13_fprop_nvfp4,w2_fprop_nvfp4 > $L/gg_t128_$arm.log 2>&1
  gg --shapes qwen3_30b --tokens 512 --ops w13_fprop_nvfp4,w2_fprop_nvfp4 > $L/gg_t512_$arm.log 2>&1
  echo "gg $arm:"; grep -hE "^bs .*pick" $L/gg_t128_$arm.log $L/gg_t512_$arm.log | awk '{print "  ", $2, $4, $7, "ms", $15, "of copy, bf16", $18, "ms"}'
done
unset DMOE_GEMM_EXPERIMENTAL
