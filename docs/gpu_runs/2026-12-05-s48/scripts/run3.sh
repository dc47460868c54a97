#!/usr/bin/env bash
# s48 run 3 (tree = main without G107, which run 2 refuted): issue #27's GEMM table in one run --
# our FP8-blockwise GEMMs against our BF16 picks (bench_grouped_gemm, EP2 sizes, balanced, interleaved
# rounds, 100 ms of each call's own load) and torch._scaled_grouped_mm / _scaled_mm / torch.mm on the
# same groups (bench/grouped_mm_peer.py --fp8, same sizes and load) -- then the MXFP8 table with 200 ms
# of load per measurement (with 50 ms the pick's row, timed right after the BF16 reference, read up to
# 20% slower than the same configuration later in the round). RUN3_BUDGET_S: this call's device time.
RUN_NAME=s48r3; source scripts/device_run_prelude.sh
left() { echo $((${RUN3_BUDGET_S:-480} - (SECONDS - T0))); }
OUT=$L scripts/quick_build.sh bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 150 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
  --rounds 2 --sustain-ms 100 --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8 > $L/gemm_table_fp8.log 2>&1
echo "gemm table fp8 rc=$? at $((SECONDS-T0)) s:"
grep -E "^fp8 .*\(pick\)|targets met" $L/gemm_table_fp8.log | sed -E "s/ +/ /g" | cut -d" " -f2,4- | cut -c1-125
if [ "$(left)" -gt 120 ]; then
  PYTHONUNBUFFERED=1 timeout $(( $(left) > 200 ? 130 : $(left) - 60 )) python3 bench/grouped_mm_peer.py --shapes qwen3_30b,mixtral,dsv3_prefill \
    --routing balanced --fp8 --sustain-ms 100 --fp8-csv $L/torch_fp8.csv > $L/torch_peer.log 2>&1
  echo "torch peer rc=$? at $((SECONDS-T0)) s:"; cat $L/torch_fp8.csv 2>/dev/null | cut -c1-120
fi
if [ "$(left)" -gt 100 ]; then
  timeout $(( $(left) - 10 )) build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
    --rounds 2 --sustain-ms 200 --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 > $L/gemm_table_mxfp8_s200.log 2>&1
  echo "gemm table mxfp8 (200 ms load) rc=$? at $((SECONDS-T0)) s:"
  grep -E "^fp8 .*(\(pick\)|_tma_dyn )" $L/gemm_table_mxfp8_s200.log | sed -E "s/ +/ /g" | cut -d" " -f2,4- | cut -c1-110
fi
