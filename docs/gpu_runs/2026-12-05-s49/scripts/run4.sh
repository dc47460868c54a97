#!/usr/bin/env bash
# s49 run 4: G110, issue #25's MXFP8 GEMM table on the layer's A scale layout (k-block-major words,
# B) against the row-major layout the table used until now (A: --mxfp8-row-major-scales), processes
# alternated A B A B; EP2 sizes, balanced, 200 ms of load, the 128x128 dyn configurations (the picks).
# RUN4_BUDGET_S: this call's device time.
RUN_NAME=s49r4; source scripts/device_run_prelude.sh
left() { echo $((${RUN4_BUDGET_S:-540} - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_grouped_gemm dist_moe_gpu_tests || exit 1
echo "built at $((SECONDS-T0)) s"
timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*' > $L/tests.log 2>&1
echo "tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|GroupsWithoutCounts" $L/tests.log | head -8
for round in 1 2; do
  for side in A B; do
    [ "$(left)" -gt 80 ] || break 2
    flag=""; [ $side = A ] && flag="--mxfp8-row-major-scales"
    timeout 150 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
      --rounds 2 --sustain-ms 200 --sweep-match _tma_dyn --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 \
      $flag > $L/gemm_mxfp8_$side$round.log 2>&1
    echo "gemm mxfp8 $side$round rc=$? at $((SECONDS-T0)) s"
  done
done
python3 - $L <<'PY'
import glob, re, sys, collections
L = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(f"{L}/gemm_mxfp8_[AB]*.log")):
    side = re.search(r"gemm_mxfp8_([AB])\d", f).group(1)
    for line in open(f):
        m = re.match(r"^fp8 (\S+)\s+\S+\s+(\S+)\s+(\S+)( \(pick\))?\s+([\d.]+) ms .* bf16\s+([\d.]+) ms\s+x bf16 ([\d.]+)", line)
        if m and m.group(4):
            rows[(m.group(1), m.group(2))][side].append((float(m.group(5)), float(m.group(6))))
print(f"{'shape':13s} {'op':16s} {'A ms':>7s} {'B ms':>7s} {'A/B':>6s} {'bf16 ms':>8s} {'A x bf16':>9s} {'B x bf16':>9s}")
met = {'A': 0, 'B': 0}
for (shape, op), d in rows.items():
    if not d['A'] or not d['B']: continue
    a = sorted(x[0] for x in d['A'])[len(d['A']) // 2]; b = sorted(x[0] for x in d['B'])[len(d['B']) // 2]
    bf = sorted(x[1] for x in d['A'] + d['B'])[len(d['A'] + d['B']) // 2]
    xa, xb = bf / a, bf / b
    met['A'] += xa >= 0.95; met['B'] += xb >= 0.95
    print(f"{shape:13s} {op:16s} {a:7.3f} {b:7.3f} {a/b:6.3f} {bf:8.3f} {xa:9.3f} {xb:9.3f}")
print(f">= 0.95x our BF16: A {met['A']} of {len(rows)}, B {met['B']} of {len(rows)} (each side's median over its runs, BF16 the median of all)")
PY
