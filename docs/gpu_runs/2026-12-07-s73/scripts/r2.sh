#!/usr/bin/env bash
# s73 r2: G152 -- MXFP8 training on the FP8-blockwise pipeline, its activations quantized once at MXFP8's
# shared scales per 128 (quant::Fp8BlockScale::kMxfp8Shared). The quantizer gtests of the new rule (rows +
# columns against the oracle in every region shape, gathered, compact, the fused SwiGLU backward) and the
# emulated-peer layers, the MXFP8 training suite, the torch MXFP8 / Mega / training-loop tests, then the
# qwen3_30b MXFP8 layer A / B twice (A: DMOE_MXFP8_REROUND=1, G151's path; B: default).
RUN_NAME=s73r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests \
  dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
gtests g152 'QuantizeMxfp8Shared*:QuantizeFp8Blockwise*:SwigluBackwardQuantize*:*EmulatedPeers*' 150
layer_suite mxfp8_train dist_moe_mxfp8_pipeline_tests B 150
env_arm .envA DMOE_MXFP8_REROUND=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^fwd:w2 |^fwd:w13 |^bwd:w13_wgrad|^bwd:w2_wgrad|^BF16 layer forward\+backward"
ARM_TIMEOUT=60 ab_layer_rounds "mxfp8 qwen3" 2 "$lines" --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100
[ "$(left)" -gt 60 ] && pytest_log torch_mxfp8 $(( $(left) > 90 ? 80 : $(left) - 10 )) "$PWD/tests/torch/test_mxfp8.py"
[ "$(left)" -gt 60 ] && pytest_log torch_mega 60 "$PWD/tests/torch/test_mega.py"
[ "$(left)" -gt 50 ] && pytest_log torch_training_loop $(( $(left) - 10 )) "$PWD/tests/torch/test_training_loop.py"
