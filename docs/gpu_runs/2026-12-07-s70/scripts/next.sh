#!/usr/bin/env bash
# For the next session's first call (not run in s70: its device time was spent): G147's first step --
# `bench_gradient_stores` with the accumulation done by the CTA (old values loaded by TMA, added in
# registers, stored; `../g147_load_add_store_bench.patch`, applied here) beside the TMA reduce-adds it
# would replace -- and the layer numbers G144 still owes on an H200 (qwen3_30b FP8 blockwise and MXFP8
# against our BF16 layer in the same process). perf_history G147 holds the prediction. First, what
# s70's review mends (9bf4e00, after its last device run) changed on the GPU side: the FP8-blockwise
# training suite (the route-score gather's grid now from the communicator's SM count) and
# `bench_wgmma_rate --wgrad` (its loop kernels on gemm::TmaPipeline; s70 r1's rows to compare).
RUN_NAME=s71next; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
P=docs/gpu_runs/2026-12-07-s70/g147_load_add_store_bench.patch
if git apply --check $P 2>/dev/null; then git apply $P || exit 2; fi
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests bench_wgmma_rate \
  bench_gradient_stores || exit 1
layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 70
timeout 30 build-gpu/bench/bench_wgmma_rate --wgrad --rounds 1 > $L/wgrad_kloop.log 2>&1
echo "bench_wgmma_rate --wgrad rc=$?"; cat $L/wgrad_kloop.log
timeout 90 build-gpu/bench/bench_gradient_stores --rounds 3 --iters 5 > $L/gradient_stores.log 2>&1
echo "bench_gradient_stores rc=$?"; cat $L/gradient_stores.log
for fmt in fp8_blockwise mxfp8; do
  [ "$(left)" -gt 60 ] || break
  timeout 50 build-gpu/dist-moe bench --shape qwen3_30b --format $fmt --no-baseline --iters 5 --sustain-ms 100 \
    > $L/layer_qwen3_$fmt.log 2>&1
  echo "qwen3_30b $fmt rc=$?"; grep -E "forward\+backward|topk_backward|quantize_grad_h3" $L/layer_qwen3_$fmt.log | head -6
done
