#!/usr/bin/env bash
# s71 r7: G150's first step -- the MXFP8 DGRADs on the FP8-blockwise DGRAD (the prepared transposed copy at
# shared 128x128 scales, the row bundles converted in place, the block scales derived per call). The new
# gtests (rows in place, block scales, the weight quantizer's shared transposed copy in every region shape,
# the prepared weight) and the emulated-peer layers, the MXFP8 training suite, the torch package's
# preparation / MXFP8 / Mega / training-loop tests, then the qwen3_30b MXFP8 layer A / B twice (A:
# DMOE_MXFP8_DGRAD_EXACT=1, the exact MXFP8 DGRAD; B: default; both with G149's WGRADs).
RUN_NAME=s71r7; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests \
  dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
gtests shared 'Mxfp8*:QuantizeMxfp8*:*EmulatedPeers*' 150
layer_suite mxfp8_train dist_moe_mxfp8_pipeline_tests B 150
pytest_log torch_prepare 60 "$PWD/tests/torch/test_prepare.py"
pytest_log torch_mxfp8 80 "$PWD/tests/torch/test_mxfp8.py"
env_arm .envA DMOE_MXFP8_DGRAD_EXACT=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^bwd:w2_dgrad|^bwd:w13_dgrad|^BF16 layer forward\+backward"
ARM_TIMEOUT=60 ab_layer_rounds "mxfp8 qwen3" 2 "$lines" --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100
[ "$(left)" -gt 70 ] && pytest_log torch_mega 60 "$PWD/tests/torch/test_mega.py"
[ "$(left)" -gt 40 ] && pytest_log torch_training_loop $(( $(left) - 10 )) "$PWD/tests/torch/test_training_loop.py"
