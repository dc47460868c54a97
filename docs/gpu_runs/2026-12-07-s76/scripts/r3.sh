#!/usr/bin/env bash
# s76 r3, to run on branch g157 (not run in s76): G156-G157 as they would land -- evict-first stores in the
# compact-column launches, gathered rows in level order; DMOE_QUANT_GATHER_PLAIN=1 (main's behaviour) is arm A.
# The gathered / compact quantizer gtests (level order against the strided row-order kernel, bit for bit), the
# FP8-blockwise training suite, the qwen3_30b FP8-blockwise layer A / B, the MXFP8 training suite, bench_quantize's
# gathered rows A / B. Any card; ~300 s.
RUN_NAME=r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests \
  dist_moe_mxfp8_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
gtests quant 'Quantize*Gathered*:Quantize*Compact*:QuantizeFp8Blockwise*:QuantizeMxfp8Shared*' 90
env_arm .envA DMOE_QUANT_GATHER_PLAIN=1 bench/bench_quantize dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
suite() {  # suite LABEL TEST LIMIT: suite_cases, then its verdict line and its case counts
  suite_cases "$@" > $L/cases_$1.txt
  echo "$(head -1 $L/cases_$1.txt) | PASS cases $(grep -c 'PASS case' $L/cases_$1.txt), FAIL $(grep -c 'FAIL case' $L/cases_$1.txt)"
}
suite fp8bw_train dist_moe_fp8_blockwise_training_tests 60
lines="^forward\+backward|^fwd:quantize_x|^bwd:quantize_grad_h3|^BF16 layer forward\+backward"
ARM_TIMEOUT=50 ab_layer_rounds "fp8bw qwen3_30b" 1 "$lines" --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 3 \
  --sustain-ms 100
suite mxfp8_train dist_moe_mxfp8_pipeline_tests 90
ARM_TIMEOUT=40 arm_rounds quant 1 "A B" "_rows_cols" bench/bench_quantize --shapes qwen3_30b,dsv3_prefill \
  --cases fp8bw_rows_cols,fp8bw_rows_cols_gc,fp8bw_rows_cols_gk,mxfp8s_rows_cols_gk
