#!/usr/bin/env bash
# s75 r3: G155 -- the gathered quantizers' source rows at evict-last in the L2. The layer A
# (DMOE_QUANT_GATHER_EVICT_NORMAL=1: the old normal rank) / B (default) alternated: FP8 blockwise at qwen3_30b
# (two rounds) and mixtral, MXFP8 at qwen3_30b and dsv3_prefill's 128-expert rank; then both block-scaled training
# suites whole on B (the WGRAD bound tightened to 1e-2, the RMSNorm cases' end-to-end margins apart).
# Any card; the first line names it. ~300 s on a fresh machine.
RUN_NAME=r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests dist_moe_mxfp8_pipeline_tests \
  || exit 1
echo "built at $((SECONDS-T0)) s"
env_arm .envA DMOE_QUANT_GATHER_EVICT_NORMAL=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^fwd:quantize_x|^fwd:w13 |^bwd:quantize_grad_h3|^bwd:recompute_quantize_x|^BF16 layer forward\+backward"
ARM_TIMEOUT=60 ab_layer_rounds "fp8bw qwen3_30b" 2 "$lines" --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=60 ab_layer_rounds "mxfp8 qwen3_30b" 1 "$lines" --shape qwen3_30b --format mxfp8 --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=90 ab_layer_rounds "mxfp8 dsv3_prefill E128" 1 "$lines" --shape dsv3_prefill --experts 128 --format mxfp8 \
  --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=80 ab_layer_rounds "fp8bw mixtral" 1 "$lines" --shape mixtral --format fp8_blockwise --no-baseline --iters 3 --sustain-ms 100
for suite in "fp8bw_train dist_moe_fp8_blockwise_training_tests 100" "mxfp8_train dist_moe_mxfp8_pipeline_tests 130"; do
  set -- $suite
  [ "$(left)" -gt 40 ] || break
  t=$3; [ "$t" -lt "$(left)" ] || t=$(( $(left) - 10 ))
  layer_suite "$1" "$2" B "$t"
  grep -E "PASS case|FAIL case" $L/suite_$1_B.log | sed -E 's/^(\[rank 0\] )+//; s/\] \(end-to-end.*$/]/'
done
