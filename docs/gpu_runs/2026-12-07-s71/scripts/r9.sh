#!/usr/bin/env bash
# s71 r9: issue #25's "each MXFP8 GEMM >= 0.95x our BF16 GEMM" for the DGRAD as the layer runs it since G150
# (ops w13_dgrad_mxfp8s / w2_dgrad_mxfp8s: the operands at shared scales on the FP8-blockwise DGRAD) beside the
# per-32 MXFP8 DGRAD and our BF16 DGRAD, at the per-rank EP2 sizes of the table, balanced rows.
RUN_NAME=s71r9; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
timeout $(( $(left) - 5 )) build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b,mixtral,dsv3_prefill --ep 2 \
  --routing balanced --ops w13_dgrad_mxfp8,w2_dgrad_mxfp8,w13_dgrad_mxfp8s,w2_dgrad_mxfp8s --rounds 2 --iters 5 \
  --sustain-ms 100 --sweep-match no_sweep > $L/dgrad_table.log 2>&1
echo "bench rc=$?"; grep -E "^fp8 .*\(pick\)" $L/dgrad_table.log | sed -E 's/ +/ /g' | cut -d' ' -f2,4,5,7,11,14,15
