#!/usr/bin/env bash
# s74 r3: G154 -- h2 quantized in the FP8-blockwise W13's epilogue. Its GPU tests (bitwise against the staged
# pair under both scale rules; the FP8 W13 / quantizer tests beside it), both block-scaled training suites'
# staged cases, then the layer A (DMOE_FP8_H2_PASS=1: BF16 h2 + the rows + columns pass) / B (the epilogue)
# alternated: MXFP8 and FP8 blockwise at qwen3_30b, MXFP8 at dsv3_prefill's 128-expert rank. (r2 found no machine.)
RUN_NAME=s74r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests \
  dist_moe_mxfp8_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
gtests g154 'W13Fp8H2*:*GroupedGemmFp8W13*:QuantizeFp8Blockwise*:QuantizeMxfp8Shared*' 150
grep -E "^w13 fp8 h2" $L/gtest_g154.log | head -8
layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 90
grep -E "PASS case|FAIL case" $L/suite_fp8bw_train_B.log | sed -E 's/.*(PASS|FAIL) case ([^ ]+) \(([0-9.]+) s\).*/\1 \2 \3/' | tr '\n' ';'; echo
env_arm .envA DMOE_FP8_H2_PASS=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^fwd:w13 |^fwd:quantize_h2|^BF16 layer forward\+backward"
ARM_TIMEOUT=60 ab_layer_rounds "mxfp8 qwen3_30b" 2 "$lines" --shape qwen3_30b --format mxfp8 --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=60 ab_layer_rounds "fp8bw qwen3_30b" 1 "$lines" --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=90 ab_layer_rounds "mxfp8 dsv3_prefill E128" 1 "$lines" --shape dsv3_prefill --experts 128 --format mxfp8 \
  --no-baseline --iters 3 --sustain-ms 100
# Last, with what is left: the MXFP8 suite whole (r2's question too: where its ~130 s go; each case's seconds).
layer_suite mxfp8_train dist_moe_mxfp8_pipeline_tests B $(( $(left) - 10 ))
grep -E "PASS case|FAIL case" $L/suite_mxfp8_train_B.log | sed -E 's/.*(PASS|FAIL) case ([^ ]+) \(([0-9.]+) s\).*/\1 \2 \3/' | tr '\n' ';'; echo
