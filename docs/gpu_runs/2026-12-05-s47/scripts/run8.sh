#!/usr/bin/env bash
# s47 run 8: the MXFP8 prefill GEMM table again, interleaved over three rounds (run 5's had one round,
# where the pick, measured first, read 2-14% slower than the same configuration later in its sweep),
# balanced then random rows. RUN8_BUDGET_S: this call's device time (default 200).
RUN_NAME=s47r8; source scripts/device_run_prelude.sh
left() { echo $((${RUN8_BUDGET_S:-200} - (SECONDS - T0))); }
OUT=$L scripts/quick_build.sh bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
for routing in balanced random; do
  [ "$(left)" -gt 40 ] || { echo "skip $routing"; continue; }
  timeout $(( $(left) - 5 )) build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing $routing \
    --rounds 3 --sustain-ms 50 --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 > $L/gemm_table_mxfp8_$routing.log 2>&1
  echo "gemm table mxfp8 $routing rc=$? at $((SECONDS-T0)) s:"
  grep -E "^fp8 .*(\(pick\)|_tma_dyn )" $L/gemm_table_mxfp8_$routing.log | sed -E "s/ +/ /g" | cut -d' ' -f2-6,9-14
done
