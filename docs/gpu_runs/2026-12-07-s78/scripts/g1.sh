#!/usr/bin/env bash
# s78 g1, for branch g160 (not run when written): G160, the NVFP4 token-row quantizer with a lane per block.
# (1) gtests: the NVFP4 / E2M1 quantizer cases (bit for bit against the oracle, the new block-count and 4-byte
# stride case); (2) A = main's kernel (g160.patch reversed) / B = this, bench_quantize's nvfp4_token_rows at
# qwen3_30b and dsv3_prefill, rounds alternated; (3) ncu instruction counts of the 65536-row launch on both.
# On an H200 it first runs c1.sh (issue #25's table on that card). Any card; ~250 s (+~130 s on an H200).
RUN_NAME=g1; BUDGET=${BUDGET:-560}; source scripts/device_run_prelude.sh
card=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader); echo "$card"
D=docs/gpu_runs/2026-12-07-s78
h200=0; [[ "$card" == *H200* ]] && h200=1
reversed_tree .abtree build-ab $L/A "bench_quantize" $D/g160.patch || exit 1
extra=""; [ $h200 = 1 ] && extra="dist-moe bench_grouped_gemm dmoe_launch dist_moe_mxfp8_pipeline_tests"
OUT=$L scripts/quick_build.sh bench_quantize dist_moe_gpu_tests $extra || exit 1
wait $REVERSED_TREE_PID; grep -q "build OK" $L/A/build.log 2>/dev/null || tail -3 $L/A/build.log
echo "built at $((SECONDS-T0)) s"
if [ $h200 = 1 ]; then
  echo "H200: issue #25's c1 first"
  OUT=$L/c1out BUDGET=$(( $(left) - 90 )) bash $D/scripts/c1.sh
fi
gtests nvfp4 'QuantizeNvfp4.*:QuantizeE2M1.*:QuantizeE4M3.*' 120
ARM_TIMEOUT=40 arm_rounds rows 3 "A B" "^(qwen3_30b|dsv3_prefill) +nvfp4_token_rows" bench/bench_quantize \
  --shapes qwen3_30b,dsv3_prefill --cases nvfp4_token_rows --iters 50 --sustain-ms 100
for arm in A B; do
  [ "$(left)" -gt 30 ] || break
  ncu_counts $arm nvfp4_rows_kernel $(arm_dir $arm)/bench/bench_quantize --shapes qwen3_30b --cases nvfp4_token_rows \
    --iters 1 --sustain-ms 0
done
