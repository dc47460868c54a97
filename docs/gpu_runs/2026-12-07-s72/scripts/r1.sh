#!/usr/bin/env bash
# s72 r1: G151 -- the MXFP8 FPROPs on the FP8-blockwise FPROP (the prepared training weight at shared 128x128
# scales in both copies and both grids, x's and h2's row bundles converted in place, the block scales derived
# per call). The gtests (the weight quantizer's shared form in every region shape and through the preparation,
# the block scales, the emulated-peer layers incl. Mega training against the per-32 staged sequence), the
# MXFP8 training suite, the torch package's preparation / MXFP8 / Mega tests, then the qwen3_30b MXFP8 layer
# A / B twice (A: DMOE_MXFP8_FPROP_PER32=1, the per-32 FPROPs on exact rows, same weights; B: default).
RUN_NAME=s72r1; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests \
  dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
gtests shared 'Mxfp8*:QuantizeMxfp8*:*EmulatedPeers*' 150
layer_suite mxfp8_train dist_moe_mxfp8_pipeline_tests B 150
pytest_log torch_prepare 60 "$PWD/tests/torch/test_prepare.py"
pytest_log torch_mxfp8 80 "$PWD/tests/torch/test_mxfp8.py"
pytest_log torch_mega 60 "$PWD/tests/torch/test_mega.py"
env_arm .envA DMOE_MXFP8_FPROP_PER32=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^fwd:w2 |^fwd:w13 |^fwd:quantize|^BF16 layer forward\+backward"
ARM_TIMEOUT=60 ab_layer_rounds "mxfp8 qwen3" 2 "$lines" --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100
