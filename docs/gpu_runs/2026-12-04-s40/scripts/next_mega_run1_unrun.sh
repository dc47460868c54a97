#!/usr/bin/env bash
# s40's first GPU run, written without a GPU (not yet run): the Mega decode launches (G94) through
# the one runner, scripts/gpu_check.sh -- the Mega GEMM tests first (a hang traps after the 60 s spin
# timeout, kSpinTimeoutNs), then every GPU test (the staged kernels changed too: the quantizer pieces
# in device/quant/ and the ld.global.cg token loads), the NVFP4 and MXFP8 layer suites with their
# Mega cases, and Mega against the staged layer (alternated in the same run) at dsv3_decode and
# qwen3_30b T = 128 (dsv3_decode's own T), both formats. Device time: ~7-9 min.
export DMOE_EXPERIMENTAL_MEGA=1 OUT=${OUT:-/tmp/dmoe-out}
mkdir -p "$OUT/mega"
DMOE_STAGES="build" OUT="$OUT/mega" scripts/gpu_check.sh
DMOE_COMM_TIMEOUT_MS=10000 timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Mega*' \
  > "$OUT/mega/mega_gemm_tests.log" 2>&1
echo "mega GEMM tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' "$OUT/mega/mega_gemm_tests.log" | tr '\n' ' ')"
for fmt in nvfp4 mxfp8; do
  stages="bench"; [ $fmt = nvfp4 ] && stages="tests nvfp4 mxfp8 bench"
  DMOE_STAGES="$stages" DMOE_BENCH_FORMAT=$fmt DMOE_BENCH_PIPELINE=mega DMOE_BENCH_SHAPES="dsv3_decode qwen3_30b" \
    DMOE_BENCH_TOKENS=128 OUT="$OUT/$fmt" scripts/gpu_check.sh
done
