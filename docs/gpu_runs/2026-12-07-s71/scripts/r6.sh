#!/usr/bin/env bash
# s71 r6: G149 again on whatever card comes (an H200 would give the at-a-glance table its card): the
# qwen3_30b MXFP8 layer A / B twice (A: DMOE_MXFP8_WGRAD_BF16=1, B: default) and the FP8-blockwise layer
# once (the H200 number G144 still owes), each against our BF16 layer in the same process.
RUN_NAME=s71r6; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe || exit 1
echo "built at $((SECONDS-T0)) s"
env_arm .envA DMOE_MXFP8_WGRAD_BF16=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^bwd:w2_wgrad|^bwd:w13_wgrad|^BF16 layer forward\+backward"
ARM_TIMEOUT=70 ab_layer_rounds "mxfp8 qwen3" 2 "$lines" --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100
timeout 60 build-gpu/dist-moe bench --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 \
  > $L/fp8bw_qwen3.log 2>&1
echo "fp8bw qwen3 rc=$?: $(grep -E '^forward\+backward|^BF16 layer forward\+backward' $L/fp8bw_qwen3.log | sed -E 's/ +/ /g' | tr '\n' ';')"
