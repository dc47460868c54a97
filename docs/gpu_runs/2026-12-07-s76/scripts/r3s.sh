#!/usr/bin/env bash
# s76 r3s, to run on branch g157 (not run in s76): r3.sh without the gtests -- G156-G157 as they would land
# (DMOE_QUANT_GATHER_PLAIN=1, main's behaviour, as arm A) -- the FP8-blockwise training suite, the
# qwen3_30b FP8-blockwise layer A / B, bench_quantize's gathered rows A / B. Any card; ~150 s on a fresh machine.
RUN_NAME=r3s; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests || exit 1
echo "built at $((SECONDS-T0)) s"
env_arm .envA DMOE_QUANT_GATHER_PLAIN=1 bench/bench_quantize dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
suite_cases fp8bw_train dist_moe_fp8_blockwise_training_tests 45 > $L/cases_fp8bw.txt
echo "$(head -1 $L/cases_fp8bw.txt) | PASS cases $(grep -c 'PASS case' $L/cases_fp8bw.txt), FAIL $(grep -c 'FAIL case' $L/cases_fp8bw.txt)"
lines="^forward\+backward|^fwd:quantize_x|^bwd:quantize_grad_h3|^BF16 layer forward\+backward"
ARM_TIMEOUT=40 ab_layer_rounds "fp8bw qwen3_30b" 1 "$lines" --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 3 \
  --sustain-ms 100
ARM_TIMEOUT=30 arm_rounds quant 1 "A B" "_rows_cols_g" bench/bench_quantize --shapes qwen3_30b,dsv3_prefill \
  --cases fp8bw_rows_cols_gc,fp8bw_rows_cols_gk
