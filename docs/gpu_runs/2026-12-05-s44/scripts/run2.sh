#!/usr/bin/env bash
# s44 run 2: perf_history G99's A/B -- MXFP8 128x128 narrow tiles (at most 64 rows of their expert)
# on both warpgroups (the pick) against warpgroup 0 alone (the "_nosplit" twin / the knob
# DMOE_MXFP8_NARROW_SPLIT=0), the same bits. GEMMs: the pick and its twin interleaved in one process
# (3 rounds); layers: the two settings in alternating processes. Run after run1 (the tests, the
# twins' bitwise test included). One device call; stops starting steps past ~540 s.
RUN_NAME=s44r2; source scripts/device_run_prelude.sh
OUT=$L scripts/quick_build.sh bench_grouped_gemm dist-moe || exit 1
gemm() {  # name shape ep tokens [sweep-match [ops]]
  local f=$L/gemm_$1.log
  [ "$(left)" -gt 60 ] || { echo "skip $1"; return; }
  timeout 150 build-gpu/bench/bench_grouped_gemm --shapes "$2" --ep "$3" --tokens "$4" --routing random \
    --ops "${6:-w13_fprop_mxfp8,w2_fprop_mxfp8}" --sweep --sweep-match "${5:-_nosplit}" --rounds 3 > $f 2>&1
  echo "gemm $1 rc=$? at $((SECONDS-T0)) s:"
  grep -E "^bs |skipped|rror" $f | sed -E "s/ +/ /g" | head -24
}
gemm qwen3_t512 qwen3_30b 1 512
gemm qwen3_t1024 qwen3_30b 1 1024
layer() {  # name split mode shape [tokens] [pipeline]
  local f=$L/layer_$1_split$2.log tok=()
  [ -n "${5:-}" ] && tok=(--tokens "$5")
  [ "$(left)" -gt 40 ] || { echo "skip $1 split=$2"; return; }
  DMOE_MXFP8_NARROW_SPLIT=$2 timeout 100 build-gpu/dist-moe bench --shape "$4" "${tok[@]}" --mode "$3" --format mxfp8 \
    --no-baseline --iters 10 --sustain-ms 50 --pipeline "${6:-staged}" > $f 2>&1
  echo "$1 split=$2 rc=$? at $((SECONDS-T0)) s: $(grep -E '^(inference forward|forward\+backward|BF16 layer|staged layer) ' $f | \
    sed -E 's/ +/ /g' | cut -d' ' -f1-5 | tr '\n' ';')"
  echo "   stages: $(grep -E '^(fwd|bwd):' $f | grep -E 'w13|w2|mega' | awk '{printf "%s %s; ", $1, $2}')"
  grep -iE "error|exception" $f | head -3
}
for r in 1 2; do
  for s in 1 0; do layer qwen3_t512_infer $s infer qwen3_30b 512; done
done
for s in 1 0; do layer qwen3_t1024_infer $s infer qwen3_30b 1024; done
for s in 1 0; do DMOE_EXPERIMENTAL_MEGA=1 layer qwen3_t512_mega $s infer qwen3_30b 512 mega; done
for s in 1 0; do layer qwen3_train $s train qwen3_30b; done
# Exploratory (the heuristic's next questions), as time allows:
# 8 and 16 rows per expert at qwen3_30b dims, every MXFP8 tile (16- / 32-token swap-AB, 128x128 split
# and not): where does the split 128x128 tile overtake the swap-AB picks (kNarrowDecodeRowsPerExpert)?
gemm qwen3_t128_all qwen3_30b 1 128 _s
gemm qwen3_t256_all qwen3_30b 1 256 _s
# FP8 blockwise at 32 and 64 rows per expert: its 32-token swap-AB pick (two passes over the weights
# at 64) against its 128x256 / 128x128 tiles (narrow tiles on warpgroup 0, tensor-bound: half a tile).
gemm qwen3_t512_fp8 qwen3_30b 1 512 _s w13_fprop_fp8,w2_fprop_fp8
gemm qwen3_t1024_fp8 qwen3_30b 1 1024 _s w13_fprop_fp8,w2_fprop_fp8
# dsv3 dims (EP2 sizes, 128 local experts): 8 rows per expert (the 16-token swap-AB pick, every
# other tile beside it: does the split 128x128 tile now beat it?) and 32 (the 128x128 pick).
gemm dsv3_t128_ep2 dsv3_decode 2 128 _s
gemm dsv3_t512_ep2 dsv3_decode 2 512 _s
