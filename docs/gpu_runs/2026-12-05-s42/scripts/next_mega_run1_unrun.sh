#!/usr/bin/env bash
# The first GPU run after sessions 40-42 (none had a GPU; not yet run): the Mega launches of both
# forms (G94 decode, G95 rows) and the fused W2 DGRAD + SwiGLU backward (G96) through the one runner,
# scripts/gpu_check.sh -- the Mega and DgradSwigluMxfp8 GEMM tests first (a hang traps after the 60 s spin timeout, kSpinTimeoutNs), then every GPU
# test (the staged kernels changed too: device/quant/ pieces, ld.global.cg token loads in the swap-AB
# epilogues and the MXFP8 scale warps), the NVFP4 and MXFP8 layer suites with their Mega cases, and
# Mega against the staged layer (alternated in the same run): NVFP4 at dsv3_decode and qwen3_30b
# T = 128; MXFP8 there and at qwen3_30b T = 512 and 1024 (the rows form) and MXFP8 training at
# qwen3_30b (forward in one launch, W2 DGRAD + SwiGLU backward in one: the stage table's
# mega_w2_dgrad_swiglu row against the staged twin's w2_dgrad + swiglu_backward_quantize_dxy); the
# torch package's Mega tests (tests/torch/test_mega.py).
# Device time: ~11-13 min.
export DMOE_EXPERIMENTAL_MEGA=1 OUT=${OUT:-/tmp/dmoe-out}
mkdir -p "$OUT/mega"
DMOE_STAGES="build" OUT="$OUT/mega" scripts/gpu_check.sh
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Mega*:DgradSwigluMxfp8*' \
  > "$OUT/mega/mega_gemm_tests.log" 2>&1
echo "mega GEMM tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' "$OUT/mega/mega_gemm_tests.log" | tr '\n' ' ')"
DMOE_STAGES="tests nvfp4 mxfp8 bench" DMOE_BENCH_FORMAT=nvfp4 DMOE_BENCH_PIPELINE=mega \
  DMOE_BENCH_SHAPES="dsv3_decode qwen3_30b" DMOE_BENCH_TOKENS=128 OUT="$OUT/nvfp4" scripts/gpu_check.sh
DMOE_STAGES="torch" TORCH_TESTS=tests/torch/test_mega.py TORCH_EXAMPLES=" " OUT="$OUT/torch" scripts/gpu_check.sh
DMOE_STAGES="bench" DMOE_BENCH_FORMAT=mxfp8 DMOE_BENCH_PIPELINE=mega DMOE_BENCH_SHAPES="dsv3_decode" \
  DMOE_BENCH_TOKENS=128 OUT="$OUT/mxfp8_decode" scripts/gpu_check.sh
DMOE_STAGES="bench" DMOE_BENCH_FORMAT=mxfp8 DMOE_BENCH_PIPELINE=mega DMOE_BENCH_SHAPES="qwen3_30b" \
  DMOE_BENCH_TOKENS="128 512 1024" OUT="$OUT/mxfp8_rows" scripts/gpu_check.sh
DMOE_STAGES="bench" DMOE_BENCH_MODE=train DMOE_BENCH_FORMAT=mxfp8 DMOE_BENCH_PIPELINE=mega DMOE_BENCH_SHAPES="qwen3_30b" \
  OUT="$OUT/mxfp8_train" scripts/gpu_check.sh

