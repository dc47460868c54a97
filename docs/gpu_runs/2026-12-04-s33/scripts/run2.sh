#!/usr/bin/env bash
# s33 r2: WGRAD adding into its output by TMA: the producer thread pulls each tile's old output
# boxes into L2 when it starts loading the tile (r2_prefetch_out.patch; the tree) against a copy
# without it (A: the patch reversed). Every TMA-writer WGRAD gets it, BF16 (the BF16 layer's) and
# FP8-blockwise. Tests on the tree: every WGRAD GEMM test, the FP8-blockwise and BF16 training
# suites. Then bench_grouped_gemm (gradients accumulated; BF16 and FP8 WGRAD, BF16 output) A/B
# alternated, once FP32 and once writing, and the training layers A/B alternated.
O=${OUT:-/tmp/o}; L=/tmp/s33r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
R=docs/gpu_runs/2026-12-04-s33
newest() { ls -t $L/$1_*.log | head -1; }
mkdir -p /tmp/A && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/A
(cd /tmp/A && patch -R -p1 < $OLDPWD/$R/r2_prefetch_out.patch) > $L/patch_A.log 2>&1
echo "A: $(grep -c prefetch_out /tmp/A/include/dist_moe/device/gemm/kernel.cuh) prefetch calls (0 expected)"
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 10 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_grouped_gemm \
    dist_moe_fp8_blockwise_training_tests dist_moe_pipeline_tests ) > $L/build.log 2>&1 &
( cfg /tmp/A /tmp/A/build-A && cmake --build /tmp/A/build-A -j 6 --target bench_grouped_gemm dist-moe dmoe_launch ) > $L/build_A.log 2>&1 &
wait
ln -sfn /tmp/A/build-A build-A; ln -sfn build-gpu build-B
for b in build-B/dist-moe build-B/bench/bench_grouped_gemm build-A/dist-moe build-A/bench/bench_grouped_gemm; do
  [ -x $b ] || { echo "missing $b"; tail -20 $L/build*.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*Wgrad*' > $L/gemm_tests.log 2>&1
echo "WGRAD GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/gemm_tests.log | head -6 | tr '\n' ' ')"
for t in fp8_blockwise_training pipeline; do
  timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_${t}_tests > $L/$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/$t.log | head -2 | tr '\n' ' ')"
done
G="--ops w13_wgrad,w2_wgrad,w13_wgrad_fp8,w2_wgrad_fp8 --routing balanced --iters 10 --sustain-ms 100"
row() { grep -E '^fp8 |^ *(qwen3_30b|mixtral|dsv3_prefill) +balanced +w(13|2)_wgrad ' $1 | tr -s ' ' | cut -c1-110 | tr '\n' '|'; }
for v in A B A B; do
  timeout 90 build-$v/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral $G --wgrad-accumulate --fp8-wgrad-bf16 > $L/gg_ep1_${v}_$SECONDS.log 2>&1
  echo "ep1 acc bf16 $v: $(row $(newest gg_ep1_$v))"
done
for v in A B A B; do
  timeout 90 build-$v/bench/bench_grouped_gemm --ep 2 --shapes dsv3_prefill $G --wgrad-accumulate --fp8-wgrad-bf16 > $L/gg_dsv3_${v}_$SECONDS.log 2>&1
  echo "dsv3 ep2 acc bf16 $v: $(row $(newest gg_dsv3_$v))"
done
for v in A B; do
  timeout 90 build-$v/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b $G --wgrad-accumulate > $L/gg_fp32_${v}_$SECONDS.log 2>&1
  echo "ep1 acc fp32 $v: $(row $(newest gg_fp32_$v))"
done
timeout 90 build-B/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b $G --fp8-wgrad-bf16 > $L/gg_write_B.log 2>&1
echo "ep1 write bf16 B: $(row $L/gg_write_B.log)"
for s in qwen3_30b qwen3_30b mixtral; do for v in A B; do
  timeout 60 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_${v}_$SECONDS.log 2>&1
  echo "layer $s $v rc=$?: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|wgrad' $(newest layer_${s}_$v) | tr -s ' ' | tr '\n' '|')"
done; done
for v in A B; do
  timeout 90 build-$v/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_${v}.log 2>&1
  echo "layer dsv3_prefill 128 experts $v rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|wgrad' $L/layer_dsv3_${v}.log | tr -s ' ' | tr '\n' '|')"
done
