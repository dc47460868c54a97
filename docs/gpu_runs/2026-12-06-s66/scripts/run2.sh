#!/usr/bin/env bash
# G140 on the H200 (written in s66, after r1-r3 on an H100): the FP8-blockwise WGRAD's two tiles
# swept where the heuristic would move the pick (dsv3_prefill EP1 / EP2 sizes: 128 / 256 rows per
# expert) and where it would not (qwen3_30b, mixtral), BF16 gradients accumulated; then the layer
# A / B: A = this tree, B = + ../g140_fp8_wgrad_short_k_128x128.patch (128x128 at <= 256 token rows
# per expert): dsv3_prefill on one GPU's 256 experts, two rounds, and qwen3_30b once (a control:
# its pick does not move). On B the FP8 GEMM gtests and the FP8-blockwise training suite.
# On an H100 the same steps (the sweep there: perf_history G140).
RUN_NAME=g140; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s66
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
ab_patch_trees $D/g140_fp8_wgrad_short_k_128x128.patch \
  "dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests" "dist-moe"
# Both tiles in one process (the sweep), interleaved rounds; one line per shape and op: the pick and
# the two _dyn rows (the layer's accumulating WGRADs take the dynamic schedule).
for ep in 1 2; do
  f=$L/sweep_ep$ep.log
  timeout 120 build-gpu/bench/bench_grouped_gemm --ep $ep --shapes dsv3_prefill,qwen3_30b,mixtral --routing balanced \
    --ops w13_wgrad_fp8,w2_wgrad_fp8 --wgrad-accumulate --fp8-wgrad-bf16 --sweep --rounds 2 --iters 5 \
    --sustain-ms 100 > $f 2>&1
  echo "sweep ep$ep rc=$? at $((SECONDS-T0)) s"
  awk '$1 == "fp8" && ($5 == "pick" || $6 ~ /_dyn$/) {printf "  %s %s %s %s ms (x bf16 %s)\n", $2, $4, ($5 == "pick" ? "pick" : $6), ($5 == "pick" ? $10 : $7), ($5 == "pick" ? $19 : $16)}' $f
done
gtests fp8 'GroupedGemmFp8*' 120
layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 150
LAYER_AB_TIMEOUT=90 scripts/layer_ab_rounds.sh dsv3_prefill_fp8bw .abtree/build-ab build-gpu 2 $L/layer_dsv3.log \
  --shape dsv3_prefill --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
grep -E '^bwd:w(13|2)_wgrad ' $L/layer_dsv3.log | sed 's/^/  /'
[ "$(left)" -gt 60 ] && LAYER_AB_TIMEOUT=50 scripts/layer_ab_rounds.sh qwen3_30b_fp8bw .abtree/build-ab build-gpu 1 \
  $L/layer_qwen3.log --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
