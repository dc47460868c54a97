#!/usr/bin/env bash
# s50 run 4: G114, three arms built in one call. A = .abtree (HEAD), B = .abtree-b (HEAD + the row
# pass's scale index stepped), C = this tree (B + the fused kernels' row output by 32-bit offsets).
# C's quantizer GPU tests; ncu warp instructions of the MXFP8 fused and gathered rows + columns
# launches at qwen3_30b per arm; bench_quantize A B C A B C; the qwen3_30b training layers A C A C.
RUN_NAME=s50r4; source scripts/device_run_prelude.sh
left() { echo $((${RUN4_BUDGET_S:-500} - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
mkdir -p $L/a $L/b
(OUT=$L/a BUILD_DIR=build-ab .abtree/scripts/quick_build.sh bench_quantize dist-moe > $L/build_a.txt 2>&1) &
pa=$!
(OUT=$L/b BUILD_DIR=build-ab .abtree-b/scripts/quick_build.sh bench_quantize > $L/build_b.txt 2>&1) &
pb=$!
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dist_moe_gpu_tests || exit 1
wait $pa $pb; cat $L/build_a.txt $L/build_b.txt; grep -q "build OK" $L/build_a.txt && grep -q "build OK" $L/build_b.txt || exit 1
echo "built at $((SECONDS-T0)) s"
dir() { case $1 in A) echo .abtree/build-ab;; B) echo .abtree-b/build-ab;; C) echo build-gpu;; esac; }
timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*' > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/tests_quant.log | head -8
for spec in "mxfp8_fused:swiglu_backward_quantize_kernel<.*Mxfp8" "mxfp8_rows_cols_g:quantize_rows_cols_kernel<.*Mxfp8"; do
  IFS=: read -r case kre <<< "$spec"
  for side in A B C; do
    timeout 60 ncu --kernel-name-base demangled -k "regex:$kre" -s 2 -c 1 --metrics smsp__inst_executed.sum,gpu__time_duration.sum \
      $(dir $side)/bench/bench_quantize --shapes qwen3_30b --iters 5 --sustain-ms 0 --cases $case > $L/ncu_${case}_$side.txt 2>&1
    echo "ncu $case $side: $(grep -E 'inst_executed|time_duration' $L/ncu_${case}_$side.txt | tr -s ' ' | tr '\n' ' ')"
  done
done
for round in 1 2; do
  for side in A B C; do
    timeout 100 $(dir $side)/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_$side$round.log 2>&1
    echo "bench_quantize $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quantize_$side$round.log)"
  done
done
python3 - $L <<'PY' | tee $L/abc_table.txt
import re, sys, collections
best = collections.defaultdict(dict)  # (shape, quantizer) -> side -> (ms, copy ms), the faster of two runs
for side in "ABC":
    for r in (1, 2):
        for line in open(f"{sys.argv[1]}/quantize_{side}{r}.log"):
            m = re.match(r"^(\S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x", line)
            if m and not m.group(1).startswith("quantizer"):
                k, v = (m.group(1), m.group(2)), (float(m.group(3)), float(m.group(4)))
                if side not in best[k] or v[0] < best[k][side][0]: best[k][side] = v
print(f"{'shape':13s} {'quantizer':22s} {'A ms':>7s} {'B ms':>7s} {'C ms':>7s} {'A/B':>6s} {'A/C':>6s} {'C x copy':>8s}")
for (shape, q), d in best.items():
    if len(d) < 3: continue
    a, b, c = d['A'][0], d['B'][0], d['C'][0]
    print(f"{shape:13s} {q:22s} {a:7.4f} {b:7.4f} {c:7.4f} {a/b:6.3f} {a/c:6.3f} {d['C'][1]/c:8.2f}")
PY
for round in 1 2; do
  for fmt in mxfp8 fp8_blockwise; do
    for side in A C; do
      [ "$(left)" -gt 20 ] || break 3
      timeout 40 $(dir $side)/dist-moe bench --shape qwen3_30b --mode train --format $fmt --no-baseline --iters 5 --sustain-ms 100 \
        > $L/layer_${fmt}_$side$round.log 2>&1
      echo "layer $fmt $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward\+backward|quantize_x|quantize_h2 |quantize_grad_h3|swiglu_backward_quantize_dxy' $L/layer_${fmt}_$side$round.log | tr -s ' ' | tr '\n' ' ')"
    done
  done
done
