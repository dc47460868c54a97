#!/usr/bin/env bash
# s69 r3: G144 after r2 (perf_history G144's r2 outcome): the scaled quantizer's row scores now copied
# ahead of their tile's use (r2 read them at the use: quantize_grad_h3 0.26 ms against quantize_x's
# 0.19), and the argument-error texts the r2 gtest failure named. B = main + the patch (applied
# below), A = main (the patch reversed on a copy). B's quantizer gtests, the qwen3_30b FP8-blockwise
# layer A / B with its two stages (and quantize_x, the unscaled gather's cost beside them), the MXFP8
# suite's Mega cases (r2's 60 s limit cut them), the MXFP8 layer A / B; each step only with the time it
# needs left (BUDGET); then, with a longer BUDGET (~540), mixtral and dsv3_prefill A / B and the torch
# training loop. Not run in s69 (device time spent on failed starts); the next session's first call.
# A later run reuses these steps by sourcing this file with RUN_NAME, B_EXTRA_TARGETS (more targets
# for B's build) and an after_build function (run once both trees are built) set.
RUN_NAME=${RUN_NAME:-s69r3}; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
P=docs/gpu_runs/2026-12-07-s69/g144_grad_h3_token_rows.patch
# B: main + the patch (applied here unless the checkout already has it).
if git apply --check $P 2>/dev/null; then git apply $P || exit 2; fi
OUT=$L scripts/ab_trees.sh $P "dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests \
  dist_moe_native dist_moe_torch ${B_EXTRA_TARGETS:-}" "dist-moe" || { tail -20 "$L/build.log" "$L/A/build.log"; exit 1; }
echo "built at $((SECONDS-T0)) s"
if declare -F after_build > /dev/null; then after_build; fi
gtests quant 'Quantize*Gathered*:Quantize*Compact*:QuantizeMxfp8.ScaledRows*:Quantize*.RowsAndColumns*' 40
stages='^(bwd:(topk_backward|quantize_grad_h3)|fwd:quantize_x) '
ab() {  # ab FORMAT: the qwen3_30b layer A / B, two rounds, and its stage lines
  LAYER_AB_TIMEOUT=25 scripts/layer_ab_rounds.sh qwen3_$1 .abtree/build-ab build-gpu 2 $L/layer_qwen3_$1.log \
    --shape qwen3_30b --format $1 --no-baseline --iters 5 --sustain-ms 100
  grep -E "$stages" $L/layer_qwen3_$1.log | sed 's/^/  /'
}
[ "$(left)" -gt 45 ] && ab fp8_blockwise
if [ "$(left)" -gt 50 ]; then
  lim=$(( $(left) - 35 )); [ $lim -gt 120 ] && lim=120
  timeout $lim build-gpu/dmoe_launch -n 1 --timeout $(( lim - 5 )) -- \
    build-gpu/tests/dist_moe_mxfp8_pipeline_tests --filter mega > $L/suite_mxfp8_mega.log 2>&1
  echo "mxfp8 suite (mega cases) rc=$? at $((SECONDS-T0)) s: $(grep -E 'PASS case|ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' \
    $L/suite_mxfp8_mega.log | cut -c1-60 | head -4 | tr '\n' ' ')"
fi
[ "$(left)" -gt 35 ] && ab mxfp8
# With a longer BUDGET: the other shapes (mixtral: K = 2, the route rows only twice the token rows;
# dsv3_prefill EP1: K = 8, 256 experts) and the torch training loop (per-block checkpointing, a whole
# step in one CUDA graph, eval between steps; MXFP8 / FP8 blockwise / BF16) on B.
for shape in mixtral dsv3_prefill; do
  [ "$(left)" -gt 120 ] || break
  LAYER_AB_TIMEOUT=50 scripts/layer_ab_rounds.sh ${shape}_fp8bw .abtree/build-ab build-gpu 1 $L/layer_$shape.log \
    --shape $shape --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
  grep -E "$stages" $L/layer_$shape.log | sed 's/^/  /'
done
[ "$(left)" -gt 90 ] && pytest_log torch_training_loop $(( $(left) - 10 )) "$PWD/tests/torch/test_training_loop.py"
