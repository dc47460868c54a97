#!/usr/bin/env bash
# s71 r3: G149 -- the MXFP8 WGRADs on the FP8-blockwise WGRAD with their column bundles at shared scales
# per 128 tokens (quant::mxfp8_columns_to_fp8_blockwise). The converter's gtests (bitwise against the host
# rule and the oracle's path), the MXFP8 training suite (the oracle now models the shared scales), the
# qwen3_30b MXFP8 layer A / B alternated (A: DMOE_MXFP8_WGRAD_BF16=1, the exact BF16 WGRAD path as before;
# B: the default), the converter against the copy and the dequantizer it replaces, the quantizer gtests and
# the FP8-blockwise training suite (strided_fp8_columns moved to pipeline_common).
RUN_NAME=s71r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests \
  dist_moe_fp8_blockwise_training_tests bench_quantize || exit 1
echo "built at $((SECONDS-T0)) s"
gtests wgrad_cols 'Mxfp8WgradColumns.*' 60
layer_suite mxfp8_train dist_moe_mxfp8_pipeline_tests B 150
env_arm .envA DMOE_MXFP8_WGRAD_BF16=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
ARM_TIMEOUT=70 ab_layer_rounds "mxfp8 qwen3" 2 "^forward\+backward|^bwd:w2_wgrad|^bwd:w13_wgrad|^BF16 layer forward\+backward" \
  --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100
timeout 60 build-gpu/bench/bench_quantize --shapes qwen3_30b --ep 1 --cases mxfp8_dequant_cols,mxfp8_cols_shared \
  > $L/quant_bench.log 2>&1
echo "bench_quantize rc=$?"; grep -E "mxfp8_(dequant_cols|cols_shared)" $L/quant_bench.log | tail -4
[ "$(left)" -gt 100 ] && gtests quant 'Quantize*' 90
[ "$(left)" -gt 90 ] && layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 80
[ "$(left)" -gt 80 ] && ARM_TIMEOUT=70 ab_layer_rounds "mxfp8 mixtral" 1 "^forward\+backward|^bwd:w2_wgrad|^bwd:w13_wgrad|^BF16 layer forward\+backward" \
  --shape mixtral --format mxfp8 --no-baseline --iters 3 --sustain-ms 100
