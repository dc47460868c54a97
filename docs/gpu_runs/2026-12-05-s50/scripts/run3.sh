#!/usr/bin/env bash
# s50 run 3: G113 (the fused dxy kernels' copies addressed by stepping). B = this tree, A = .abtree
# (HEAD without it). B's quantizer GPU tests; the warp instructions of one MXFP8 fused launch at
# qwen3_30b in each arm (ncu); bench_quantize A B A B; the qwen3_30b training layers A B A B.
RUN_NAME=s50r3; source scripts/device_run_prelude.sh
left() { echo $((${RUN3_BUDGET_S:-520} - (SECONDS - T0))); }
S=docs/gpu_runs/2026-12-05-s49/scripts
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
(OUT=$L/a BUILD_DIR=build-ab .abtree/scripts/quick_build.sh bench_quantize dist-moe > $L/build_a.txt 2>&1) &
pa=$!
mkdir -p $L/a
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dist_moe_gpu_tests || exit 1
wait $pa; cat $L/build_a.txt; grep -q "build OK" $L/build_a.txt || exit 1
echo "built at $((SECONDS-T0)) s"
A=.abtree/build-ab; B=build-gpu
timeout 100 $B/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*' > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/tests_quant.log | head -8
for side in A B; do
  d=$B; [ $side = A ] && d=$A
  timeout 60 ncu --kernel-name-base demangled -k "regex:swiglu_backward_quantize_kernel<.*Mxfp8" -s 2 -c 1 \
    --metrics smsp__inst_executed.sum,gpu__time_duration.sum $d/bench/bench_quantize --shapes qwen3_30b --iters 5 \
    --sustain-ms 0 --cases mxfp8_fused > $L/ncu_inst_$side.txt 2>&1
  echo "ncu $side: $(grep -E 'inst_executed|time_duration' $L/ncu_inst_$side.txt | tr -s ' ' | tr '\n' ' ')"
done
for round in 1 2; do
  for side in A B; do
    d=$B; [ $side = A ] && d=$A
    timeout 100 $d/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_$side$round.log 2>&1
    echo "bench_quantize $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quantize_$side$round.log)"
  done
done
sed -n '/^python3 - \$L <<.PY.$/,/^PY$/p' $S/run1.sh | sed '1d;$d' > $L/ab.py && python3 $L/ab.py $L | tee $L/ab_table.txt | grep -E 'shape|fused|two_passes|swiglu'
for round in 1 2; do
  for fmt in mxfp8 fp8_blockwise; do
    for side in A B; do
      [ "$(left)" -gt 20 ] || break 3
      d=$B; [ $side = A ] && d=$A
      timeout 40 $d/dist-moe bench --shape qwen3_30b --mode train --format $fmt --no-baseline --iters 5 --sustain-ms 100 \
        > $L/layer_${fmt}_$side$round.log 2>&1
      echo "layer $fmt $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward\+backward|swiglu_backward_quantize_dxy' $L/layer_${fmt}_$side$round.log | tr -s ' ' | tr '\n' ' ')"
    done
  done
done
