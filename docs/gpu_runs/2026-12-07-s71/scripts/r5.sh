#!/usr/bin/env bash
# s71 r5: the GPU gtests the session touched, on main as it lands: the quantizers and the converter
# (argument errors through the shared expect_invalid_argument), the fused SwiGLU backward quantizers,
# and the emulated-peer layers (MXFP8 training at EP 2 / 4 views against the oracle: G149's WGRADs).
RUN_NAME=s71r5; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests || exit 1
echo "built at $((SECONDS-T0)) s"
gtests quant_cols 'Quantize*:Mxfp8WgradColumns.*:SwigluBackward*' 150
gtests emulated '*EmulatedPeers*' 240
