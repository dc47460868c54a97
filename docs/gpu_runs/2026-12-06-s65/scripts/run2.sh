#!/usr/bin/env bash
# s65 r2, any card: G138 A / B (perf_history G138: the NVFP4 row expansion at 48 registers, 5 CTAs
# per SM, two rounds of them in the grid). B = this tree with ../g138_expand_rows_40_warps.patch
# applied (here, on the device's copy), A = without it (scripts/ab_trees.sh reverses it). On B: the
# NVFP4 quantizer and expansion GPU tests. Alternated, four rounds: bench_quantize's two expansions
# (dense packed rows; through a row-pointer table) and the NVFP4 token rows, whose kernel is the same
# in both arms (G137 was dropped after r1): their spread is the noise of these rows.
RUN_NAME=s65r2; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s65
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
ab_patch_trees $D/g138_expand_rows_40_warps.patch "bench_quantize dist_moe_gpu_tests" bench_quantize
gtests nvfp4q 'QuantizeNvfp4*:Nvfp4ExpandRows*' 100
arm_rounds "rows" 4 "A B" '^(dsv3_prefill|qwen3_30b) +nvfp4_' bench/bench_quantize --shapes dsv3_prefill,qwen3_30b \
  --cases nvfp4_token_rows,nvfp4_expand_rows,nvfp4_expand_rows_g --iters 50 --sustain-ms 100
# Issue #24's whole table once on B, if time is left.
if [ "$(left)" -gt 60 ]; then
  f=$L/quantize_B.log
  timeout 100 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $f 2>&1
  echo "bench_quantize B rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $f)"
  grep -E ' below$' $f | sed 's/^/  /'
fi
