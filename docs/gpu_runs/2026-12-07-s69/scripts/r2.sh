#!/usr/bin/env bash
# s69 r2: G144 (perf_history) -- the top-k backward's grad_h3 left to the block-scaled quantizer. B =
# this checkout (the patch applied), A = it reversed (scripts/ab_trees.sh). B's quantizer gtests (the
# scaled gathered rows against the rows scaled on the host, both formats, and the gathered / compact
# rows + columns cases around them), the FP8-blockwise and MXFP8 layer suites (the oracle), the qwen3_30b
# FP8-blockwise and MXFP8 layers A / B with their topk_backward / quantize_grad_h3 stages, and the torch
# package's emulated-peer cases (EP2 / EP4 rank rows read through the aliased windows) and FP8-blockwise
# tests. BUDGET (the prelude's left()) trims the later steps.
RUN_NAME=s69r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
P=docs/gpu_runs/2026-12-07-s69/g144_grad_h3_token_rows.patch
OUT=$L scripts/ab_trees.sh $P "dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests \
  dist_moe_mxfp8_pipeline_tests dist_moe_native dist_moe_torch" "dist-moe" ||
  { tail -20 "$L/build.log" "$L/A/build.log"; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests quant 'Quantize*Gathered*:Quantize*Compact*:QuantizeMxfp8.ScaledRows*:Quantize*.RowsAndColumns*' 90
[ "$(left)" -gt 80 ] && layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 70
[ "$(left)" -gt 80 ] && layer_suite mxfp8 dist_moe_mxfp8_pipeline_tests B 70
stages='^bwd:(topk_backward|quantize_grad_h3) '
for fmt in fp8_blockwise mxfp8; do
  [ "$(left)" -gt 70 ] || break
  LAYER_AB_TIMEOUT=40 scripts/layer_ab_rounds.sh qwen3_$fmt .abtree/build-ab build-gpu 2 $L/layer_qwen3_$fmt.log \
    --shape qwen3_30b --format $fmt --no-baseline --iters 5 --sustain-ms 100
  grep -E "$stages" $L/layer_qwen3_$fmt.log | sed 's/^/  /'
done
[ "$(left)" -gt 100 ] && pytest_log torch_two_rank_emulated $(( $(left) - 60 )) "$PWD/tests/torch/test_two_rank.py" -k emulated
[ "$(left)" -gt 60 ] && pytest_log torch_fp8bw $(( $(left) - 10 )) "$PWD/tests/torch/test_fp8_blockwise.py"
