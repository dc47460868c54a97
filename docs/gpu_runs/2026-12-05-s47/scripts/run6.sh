#!/usr/bin/env bash
# s47 run 6: what s46's run4.sh had beyond run 5's steps, each if time is left (RUN6_BUDGET_S, default
# 540): (1) today's MXFP8 prefill GEMM table (EP2 sizes, three shapes, balanced rows; every compiled
# configuration of the format against our BF16 pick of the same op), to refresh docs/perf.md's row
# (session 18's); (2) the FP8 decode tiles at dsv3 dims, 8 rows per expert (EP2 sizes, T = 128): does
# W2 want the 128x256 tile there too (G101's note); (3) the Mega ncu (bench-rank, s43's script).
RUN_NAME=s47r6; source scripts/device_run_prelude.sh
left() { echo $((${RUN6_BUDGET_S:-540} - (SECONDS - T0))); }
OUT=$L scripts/quick_build.sh all || exit 1
for fmt in mxfp8; do
  [ "$(left)" -gt 120 ] || { echo "skip table $fmt"; continue; }
  timeout 110 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
    --rounds 1 --sustain-ms 50 --ops w13_fprop_$fmt,w2_fprop_$fmt,w13_dgrad_$fmt,w2_dgrad_$fmt > $L/gemm_table_$fmt.log 2>&1
  echo "gemm table $fmt rc=$? at $((SECONDS-T0)) s:"
  grep -E "^fp8 .*\(pick\)|targets met" $L/gemm_table_$fmt.log | sed -E "s/ +/ /g" | cut -c1-170
done
if [ "$(left)" -gt 60 ]; then
  timeout 50 build-gpu/bench/bench_grouped_gemm --shapes dsv3_decode --ep 2 --tokens 128 --routing random \
    --ops w13_fprop_fp8,w2_fprop_fp8 --sweep --sweep-match _s --rounds 2 > $L/gemm_dsv3_t128_ep2_fp8.log 2>&1
  echo "gemm dsv3 T128 EP2 fp8 rc=$? at $((SECONDS-T0)) s:"
  grep -E "^bs " $L/gemm_dsv3_t128_ep2_fp8.log | sed -E "s/ +/ /g" | cut -d' ' -f2-7,19-22
fi
[ "$(left)" -gt 200 ] || exit 0  # four profiled processes, each with three imports
NCU_STEP_S=$(( ($(left) - 160) / 4 )) OUT=$L/ncu bash docs/gpu_runs/2026-12-05-s43/scripts/next_ncu_mega_unrun.sh 2>&1 | tail -40
