#!/usr/bin/env bash
# s66 r1: G139 A / B on any card. A = this tree, B = this tree + ../g139_fp8_wgrad_deep_staging.patch
# (the FP8-blockwise 128x256 WGRAD with four staging buffers per warpgroup: a tile's whole epilogue
# staged without waiting for its own TMA reduce-adds). Alternated, most telling first: the FP8 WGRAD
# picks at the qwen3_30b, mixtral and dsv3_prefill EP2 sizes (BF16 gradients accumulated, the
# layer's case; our BF16 WGRAD timed beside each), the qwen3_30b FP8-blockwise training layer; on B
# the FP8 GEMM gtests and the FP8-blockwise training suite against the CPU oracle; then, while time
# is left, dsv3_prefill on one GPU's 256 experts (one k block per WGRAD tile): its WGRAD picks and
# its training layer.
RUN_NAME=s66r1; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s66
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
ab_patch_trees $D/g139_fp8_wgrad_deep_staging.patch \
  "dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests" \
  "dist-moe bench_grouped_gemm"
# wgrad_rounds LABEL N BENCH-ARGS...: N alternated A / B rounds of the FP8 WGRAD picks, one line each:
# "shape op ms (our BF16 WGRAD ms, x BF16)".
wgrad_rounds() {
  local label=$1 n=$2 r arm f; shift 2
  for r in $(seq 1 "$n"); do
    for arm in A B; do
      [ "$(left)" -lt 60 ] && return
      f=$L/wgrad_${label}_$arm$r.log
      timeout 90 $(arm_dir $arm)/bench/bench_grouped_gemm --routing balanced --ops w13_wgrad_fp8,w2_wgrad_fp8 \
        --wgrad-accumulate --fp8-wgrad-bf16 "$@" > $f 2>&1
      echo "wgrad $label $arm$r: $(awk '$1 == "fp8" && $5 == "pick" {printf "%s %s %s ms (bf16 %s, x %s); ", $2, $4, $10, $15, $19}' $f)"
    done
  done
}
wgrad_rounds ep2 2 --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --iters 10 --sustain-ms 100
LAYER_AB_TIMEOUT=60 scripts/layer_ab_rounds.sh qwen3_30b_fp8bw .abtree/build-ab build-gpu 2 $L/layer_qwen3.log \
  --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
grep -E '^bwd:w(13|2)_wgrad ' $L/layer_qwen3.log | sed 's/^/  /'
gtests fp8 'GroupedGemmFp8*' 120
timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests \
  > $L/suite_fp8bw_train.log 2>&1
echo "FP8-blockwise training suite B rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|ERROR' $L/suite_fp8bw_train.log | head -3 | tr '\n' ' ')"
wgrad_rounds ep1 1 --ep 1 --shapes dsv3_prefill --iters 5 --sustain-ms 100
[ "$(left)" -gt 130 ] && LAYER_AB_TIMEOUT=60 scripts/layer_ab_rounds.sh dsv3_prefill_fp8bw .abtree/build-ab build-gpu 1 \
  $L/layer_dsv3.log --shape dsv3_prefill --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
grep -E '^bwd:w(13|2)_wgrad ' $L/layer_dsv3.log 2>/dev/null | sed 's/^/  /'
