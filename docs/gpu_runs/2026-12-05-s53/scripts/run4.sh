#!/usr/bin/env bash
# The final tree (main after G119's FP8-blockwise part), on whatever single GPU comes: every GPU gtest,
# the FP8-blockwise inference pipeline suite (the training suite ran in r1 on the same kernels), and
# scripts/layer_ab_rounds.sh for real (A = B = this build, one round: the new helper against the real
# bench output).
RUN_NAME=final; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_fp8_blockwise_pipeline_tests || { tail -20 $L/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
timeout 330 build-gpu/tests/dist_moe_gpu_tests --gtest_color=no > $L/gpu_tests.log 2>&1
echo "GPU gtests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E '^\[  FAILED' $L/gpu_tests.log | head -5
[ "$(left)" -gt 90 ] && { timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_fp8_blockwise_pipeline_tests > $L/suite_fp8bw.log 2>&1
  echo "FP8-blockwise pipeline suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case' $L/suite_fp8bw.log | head -2 | tr '\n' ' ')"; }
[ "$(left)" -gt 40 ] && LAYER_AB_TIMEOUT=60 scripts/layer_ab_rounds.sh qwen3_30b_fp8bw build-gpu build-gpu 1 $L/layer.log \
  --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
