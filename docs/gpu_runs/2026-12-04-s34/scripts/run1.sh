#!/usr/bin/env bash
# s34 r1: G74 -- the FP8-blockwise 128x256 WGRAD with four stages, one TMA staging buffer per
# warpgroup and warpgroup 1 a k block behind warpgroup 0 (the tree: g74 patch applied), picked with
# DMOE_GEMM_EXPERIMENTAL=1 (arm B) against the s3 pick (arm A, the same binary without the variable).
# Tests: every compiled FP8 WGRAD configuration; the FP8-blockwise training suite with B's pick.
# Then bench_grouped_gemm (BF16 gradients accumulated) A/B alternated, one sweep, and the layers.
O=${OUT:-/tmp/o}; L=/tmp/s34r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
newest() { ls -t $L/$1_*.log | head -1; }
arm() { if [ $1 = B ]; then echo DMOE_GEMM_EXPERIMENTAL=1; else echo DMOE_GEMM_EXPERIMENTAL=0; fi; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=$NCCL > $L/cmake.log 2>&1
cmake --build build-gpu -j 16 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_grouped_gemm \
  dist_moe_fp8_blockwise_training_tests > $L/build.log 2>&1 || { echo "build failed"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8Wgrad*' > $L/gemm_tests.log 2>&1
echo "FP8 WGRAD GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/gemm_tests.log | head -6 | tr '\n' ' ')"
env DMOE_GEMM_EXPERIMENTAL=1 DMOE_PRINT_GEMM_CONFIG=1 timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/fp8_training_B.log 2>&1
echo "fp8_blockwise_training (B pick) rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/fp8_training_B.log | head -2 | tr '\n' ' '); picks: $(grep -oE 'wgrad[^ ]* [^ ]*128x256[^ ]*' $L/fp8_training_B.log | sort | uniq -c | head -3 | tr '\n' ' ')"
G="--ops w13_wgrad_fp8,w2_wgrad_fp8 --wgrad-accumulate --fp8-wgrad-bf16 --routing balanced --iters 10 --sustain-ms 100"
row() { grep -E '^fp8 ' $1 | tr -s ' ' | cut -d" " -f2,4,10,12,15,19 | tr '\n' '|'; }
for v in A B A B; do
  env $(arm $v) timeout 60 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral $G > $L/gg_ep1_${v}_$SECONDS.log 2>&1
  echo "ep1 $v: $(row $(newest gg_ep1_$v))"
done
for v in A B A B; do
  env $(arm $v) timeout 60 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes dsv3_prefill $G > $L/gg_dsv3_${v}_$SECONDS.log 2>&1
  echo "dsv3 ep2 $v: $(row $(newest gg_dsv3_$v))"
done
timeout 120 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b $G --sweep --rounds 2 > $L/sweep_qwen3.log 2>&1
echo "sweep qwen3 rc=$?:"; grep -iE "128x256" $L/sweep_qwen3.log | tail -8
for s in qwen3_30b qwen3_30b; do for v in A B; do
  env $(arm $v) timeout 60 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_${v}_$SECONDS.log 2>&1
  echo "layer $s $v rc=$?: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|wgrad' $(newest layer_${s}_$v) | tr -s ' ' | tr '\n' '|')"
done; done
for v in A B; do
  env $(arm $v) timeout 90 build-gpu/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_${v}.log 2>&1
  echo "layer dsv3_prefill 128 experts $v rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|wgrad' $L/layer_dsv3_${v}.log | tr -s ' ' | tr '\n' '|')"
done
