#!/usr/bin/env bash
# s64 r4: G136 A / B on any card (perf_history G136: the NVFP4 token-row quantizer as one wave of
# CTAs walking the rows, the next row loading under the current one). B = this tree with
# ../g136_token_row_walk.patch applied (git apply, here on the device's copy), A = without it
# (scripts/ab_trees.sh reverses it again). On B: the quantizer GPU tests (the new several-waves test
# included). Alternated, three rounds: bench_quantize's NVFP4 token rows at dsv3_prefill and
# qwen3_30b; then issue #24's whole table once per arm (A B).
RUN_NAME=s64r4; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s64
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
git apply $D/g136_token_row_walk.patch || { echo "the G136 patch does not apply"; exit 2; }
OUT=$L scripts/ab_trees.sh $PWD/$D/g136_token_row_walk.patch "bench_quantize dist_moe_gpu_tests" bench_quantize ||
  { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests quant 'Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*' 150
grep -E '^\[       OK \] QuantizeNvfp4' $L/gtest_quant.log | sed 's/^/  /'
rows() { grep -E '^(dsv3_prefill|qwen3_30b) +nvfp4_token_rows ' "$1" | awk '{printf "%s %s %s ms copy %s %s; ", $1, $2, $3, $4, $5}'; }
for r in 1 2 3; do
  for arm in A B; do
    [ "$(left)" -lt 150 ] && break 2
    f=$L/rows_$arm$r.log
    timeout 40 $(arm_dir $arm)/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --cases nvfp4_token_rows \
      --iters 50 --sustain-ms 100 > $f 2>&1
    echo "token rows $arm$r rc=$?: $(rows $f)"
  done
done
for arm in A B; do
  [ "$(left)" -lt 70 ] && break
  f=$L/quantize_${arm}1.log
  timeout 100 $(arm_dir $arm)/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $f 2>&1
  echo "bench_quantize $arm rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $f)"
  grep -E ' below$' $f | sed 's/^/  /'
done
python3 scripts/quantize_ab_table.py $L AB > $L/ab_table.txt 2>&1 && grep -E 'shape|nvfp4_token' $L/ab_table.txt
