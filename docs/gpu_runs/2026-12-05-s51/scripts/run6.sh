#!/usr/bin/env bash
# s51 r6: G117 A/B. A = this tree without g117_gathered_pointers_ahead_dropped.patch, B = with it (the
# gathered rows + columns quantizer loads each token tile's row pointers at the previous token tile's
# first issue). B's quantizer GPU tests (bitwise vs the oracle); bench_quantize A / B alternated,
# two rounds, dsv3_prefill + qwen3_30b, table by scripts/quantize_ab_table.py; ncu by line of B's
# layer quantize_x form (MXFP8) if time is left.
# To rerun: apply ../g117_gathered_pointers_ahead_dropped.patch to the tree first (B = the tree with it).
RUN_NAME=s51r6; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-05-s51
nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf .abtree && mkdir .abtree && tar -cf - --exclude='./build*' --exclude='./.abtree*' . | tar -xf - -C .abtree
(cd .abtree && patch -s -R -p1 < ../$D/g117_gathered_pointers_ahead_dropped.patch) || { echo "patch does not reverse"; exit 1; }
mkdir -p $L/A
(OUT=$L BUILD_DIR=build-gpu scripts/quick_build.sh bench_quantize dist_moe_gpu_tests) &
(cd .abtree && OUT=$L/A BUILD_DIR=build-ab scripts/quick_build.sh bench_quantize) &
wait
[ -x build-gpu/bench/bench_quantize ] && [ -x .abtree/build-ab/bench/bench_quantize ] || { echo "build failed"; exit 1; }
echo "built at $((SECONDS-T0)) s"
timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*' > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/tests_quant.log | head -8
for r in 1 2; do
  for side in A B; do
    bin=build-gpu/bench/bench_quantize; [ $side = A ] && bin=.abtree/build-ab/bench/bench_quantize
    timeout 100 $bin --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_$side$r.log 2>&1
  done
  echo "quant round $r at $((SECONDS-T0)) s"
done
python3 scripts/quantize_ab_table.py $L AB | tee $L/quant_ab_table.txt | grep -E "shape|rows_cols|_g" | head -30
[ "$(left)" -gt 60 ] || exit 0
timeout 60 ncu --kernel-name-base demangled -k "regex:quantize_rows_cols_kernel<.*Mxfp8" -s 2 -c 1 --section SourceCounters \
  -o $L/gc build-gpu/bench/bench_quantize --shapes qwen3_30b --iters 5 --sustain-ms 0 --cases mxfp8_rows_cols_gc > $L/ncu_gc_run.txt 2>&1
timeout 60 ncu --import $L/gc.ncu-rep --page source --csv --print-source cuda,sass > $L/ncu_gc_B_page.csv 2>&1
python3 scripts/ncu_by_line.py $L/ncu_gc_B_page.csv 12 | tee $L/ncu_gc_B_by_line.txt | head -8
gzip $L/ncu_gc_B_page.csv; rm -f $L/gc.ncu-rep
