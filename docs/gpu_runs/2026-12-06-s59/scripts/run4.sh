#!/usr/bin/env bash
# s59 r4: G124 A / B -- the MXFP8 column dequantizer with three stages (../g124_dequant_three_stages_dropped.patch;
# B = this tree, A = the patch reversed). B's quantizer GPU tests (bitwise vs the oracle); bench_quantize
# A / B alternated, three rounds, dsv3_prefill + qwen3_30b, table by scripts/quantize_ab_table.py.
RUN_NAME=s59r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
P=docs/gpu_runs/2026-12-06-s59/g124_dequant_three_stages_dropped.patch
OUT=$L scripts/ab_trees.sh $P "bench_quantize dist_moe_gpu_tests" bench_quantize ||
  { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built A/B at $((SECONDS-T0)) s"
gtests quant 'Quantize*:SwigluBackwardQuantize*:*Dequantiz*' 150
for r in 1 2 3; do
  for side in A B; do
    [ "$(left)" -lt 60 ] && break 2
    bin=build-gpu/bench/bench_quantize; [ $side = A ] && bin=.abtree/build-ab/bench/bench_quantize
    timeout 100 $bin --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_$side$r.log 2>&1
  done
  echo "quant round $r at $((SECONDS-T0)) s: B $(grep 'of 32' $L/quantize_B$r.log)"
done
python3 scripts/quantize_ab_table.py $L AB > $L/quant_ab_table.txt
grep -E "shape|dequant" $L/quant_ab_table.txt | head -12
