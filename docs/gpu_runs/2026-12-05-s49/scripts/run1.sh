#!/usr/bin/env bash
# s49 run 1: G109, the quantizer rings on 128-byte lines. B = this tree (build-gpu); A = .abtree (this
# tree with src/quant as at d9c5b30: the rings where the static variables end), carried by the call.
# Both built at once; the quantizer GPU tests on B; bench_quantize A / B / A / B; the qwen3_30b
# training layers (MXFP8, FP8 blockwise) A / B / A / B with their stage tables; ncu source counters
# of B's MXFP8 fused dxy kernel (the ring copies' sectors). RUN1_BUDGET_S: this call's device time.
RUN_NAME=s49r1; source scripts/device_run_prelude.sh
left() { echo $((${RUN1_BUDGET_S:-540} - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
(OUT=$L/a BUILD_DIR=build-ab .abtree/scripts/quick_build.sh bench_quantize dist-moe dmoe_launch > $L/build_a.txt 2>&1) &
pa=$!
mkdir -p $L/a
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dmoe_launch dist_moe_gpu_tests || exit 1
wait $pa; cat $L/build_a.txt; grep -q "build OK" $L/build_a.txt || exit 1
echo "built at $((SECONDS-T0)) s"
A=.abtree/build-ab; B=build-gpu
timeout 150 $B/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*:Mxfp8Chain*' \
  > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/tests_quant.log | head -8
for round in 1 2; do
  for side in A B; do
    [ "$(left)" -gt 150 ] || break 2
    d=$B; [ $side = A ] && d=$A
    timeout 100 $d/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_$side$round.log 2>&1
    echo "bench_quantize $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quantize_$side$round.log)"
  done
done
python3 - $L <<'PY'
import glob, re, sys, collections
L = sys.argv[1]
vals = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(f"{L}/quantize_[AB]*.log")):
    side = re.search(r"quantize_([AB])\d", f).group(1)
    shape = None
    for line in open(f):
        m2 = re.match(r"^(\S+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+([\d.]+)x$", line.strip())
        h = re.match(r"^(dsv3_prefill|qwen3_30b)\b", line)
        if h: shape = h.group(1)
        if m2 and shape: vals[(shape, m2.group(1))][side].append((float(m2.group(2)), float(m2.group(4))))
print(f"{'shape':13s} {'quantizer':22s} {'A ms':>8s} {'B ms':>8s} {'A/B':>6s} {'A x copy':>9s} {'B x copy':>9s}")
for (shape, q), d in vals.items():
    if not d['A'] or not d['B']: continue
    a = min(x[0] for x in d['A']); b = min(x[0] for x in d['B'])
    ac = max(x[1] for x in d['A']); bc = max(x[1] for x in d['B'])
    print(f"{shape:13s} {q:22s} {a:8.4f} {b:8.4f} {a/b:6.3f} {ac:9.2f} {bc:9.2f}")
PY
for round in 1 2; do
  for fmt in mxfp8 fp8_blockwise; do
    for side in A B; do
      [ "$(left)" -gt 60 ] || break 3
      d=$B; [ $side = A ] && d=$A
      timeout 60 $d/dist-moe bench --shape qwen3_30b --mode train --format $fmt --no-baseline --iters 5 --sustain-ms 100 \
        > $L/layer_${fmt}_$side$round.log 2>&1
      echo "layer $fmt $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward\+backward|^BF16 layer forward\+backward' $L/layer_${fmt}_$side$round.log | tr -s ' ' | tr '\n' ' ')"
      grep -E 'quantize|swiglu_backward' $L/layer_${fmt}_$side$round.log | tr -s ' ' | tr '\n' ';'; echo
    done
  done
done
if [ "$(left)" -gt 40 ]; then
  timeout 35 ncu --kernel-name-base demangled -k "regex:swiglu_backward_quantize_kernel<.*Mxfp8" -s 2 -c 1 --section SpeedOfLight \
    --section SourceCounters -o $L/ncu_dxy_mxfp8_B $B/bench/bench_quantize --shapes qwen3_30b --iters 3 --sustain-ms 0 > $L/ncu_dxy.txt 2>&1
  echo "ncu rc=$? at $((SECONDS-T0)) s"
  timeout 20 ncu --import $L/ncu_dxy_mxfp8_B.ncu-rep --page source --csv --print-source sass > $L/source_dxy_mxfp8_B.csv 2>&1
  python3 - $L/source_dxy_mxfp8_B.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]; ix = {h: i for i, h in enumerate(hdr)}
def tot(k): return sum(float(r[ix[k]].replace(',', '') or 0) for r in rows[2:] if r[ix[k]] not in ('-', ''))
for k in ["L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal", "L2 Theoretical Sectors Global Excessive",
          "L1 Wavefronts Shared", "L1 Wavefronts Shared Excessive"]:
    print(f"{k}: {tot(k):.0f}")
PY
  grep -E "Duration|DRAM Throughput" $L/ncu_dxy.txt | head -4
fi
