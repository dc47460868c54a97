#!/usr/bin/env bash
# s49 run 5: G111 (the gathered quantizer prefetches the next token tile's row pointers into L1) and
# the revised G109 (declaration-aligned rings). B = this tree; A = .abtree, the same tree without the
# prefetch line. Quantizer GPU tests (with the null-counts argument errors); bench_quantize A B A B;
# ncu source counters of B's MXFP8 fused dxy (excess sectors: 0 expected) and gathered MXFP8 rows +
# columns (the SHFL stalls); the qwen3_30b training layers A / B (quantize_x, quantize_grad_h3).
RUN_NAME=s49r5; source scripts/device_run_prelude.sh
left() { echo $((${RUN5_BUDGET_S:-540} - (SECONDS - T0))); }
S=docs/gpu_runs/2026-12-05-s49/scripts
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
(OUT=$L/a BUILD_DIR=build-ab .abtree/scripts/quick_build.sh bench_quantize dist-moe dmoe_launch > $L/build_a.txt 2>&1) &
pa=$!
mkdir -p $L/a
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dmoe_launch dist_moe_gpu_tests || exit 1
wait $pa; cat $L/build_a.txt; grep -q "build OK" $L/build_a.txt || exit 1
echo "built at $((SECONDS-T0)) s"
A=.abtree/build-ab; B=build-gpu
timeout 100 $B/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*' > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
grep -E "^\[  FAILED|ArgumentErrors \(" $L/tests_quant.log | head -8
for round in 1 2; do
  [ "$(left)" -gt 130 ] || break  # a round is both sides
  for side in A B; do
    d=$B; [ $side = A ] && d=$A
    timeout 100 $d/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_$side$round.log 2>&1
    echo "bench_quantize $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quantize_$side$round.log)"
  done
done
sed -n '/^python3 - \$L <<.PY.$/,/^PY$/p' $S/run1.sh | sed '1d;$d' > $L/ab.py && python3 $L/ab.py $L | tee $L/ab_table.txt | grep -E 'shape|rows_cols|fused|fp8bw_w'
for spec in "mxfp8_fused:swiglu_backward_quantize_kernel<.*Mxfp8:2" "mxfp8_rows_cols_g:quantize_rows_cols_kernel<.*Mxfp8:3"; do
  [ "$(left)" -gt 60 ] || break
  IFS=: read -r case kre skip <<< "$spec"
  timeout 40 ncu --kernel-name-base demangled -k "regex:$kre" -s $skip -c 1 --section SpeedOfLight --section SourceCounters \
    -o $L/ncu_$case $B/bench/bench_quantize --shapes qwen3_30b --iters 5 --sustain-ms 0 --cases $case > $L/ncu_$case.txt 2>&1
  timeout 20 ncu --import $L/ncu_$case.ncu-rep --page source --csv --print-source sass > $L/source_$case.csv 2>/dev/null
  echo "== $case at $((SECONDS-T0)) s"; python3 $S/ncu_source_summary.py $L/source_$case.csv | sed -n '2p;/Stall Sampling/,+6p'
done
for round in 1 2; do
  for fmt in fp8_blockwise mxfp8; do
    [ "$(left)" -gt 30 ] || break 2
    for side in A B; do
      d=$B; [ $side = A ] && d=$A
      timeout 40 $d/dist-moe bench --shape qwen3_30b --mode train --format $fmt --no-baseline --iters 5 --sustain-ms 100 \
        > $L/layer_${fmt}_$side$round.log 2>&1
      echo "layer $fmt $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward\+backward|^BF16 layer forward\+backward' $L/layer_${fmt}_$side$round.log | tr -s ' ' | tr '\n' ' ')"
      grep -E 'quantize_x|quantize_grad_h3' $L/layer_${fmt}_$side$round.log | tr -s ' ' | tr '\n' ';'; echo
    done
  done
done
