#!/usr/bin/env bash
# s50 run 1 (on the H200 if one comes): G112 A / B and the H200 tables s49 could not take.
# B = this tree (G112's patch applied: the fused dxy kernels' column-scale staging padded), A = .abtree
# (HEAD without it). Quantizer GPU tests on B (G112 + the mended null-counts test); bench_quantize
# A B A B (issue #24's table, both arms); training layers on B: qwen3_30b / mixtral MXFP8, qwen3_30b FP8
# blockwise, each against our BF16 layer (issues #25, #27); issue #25's MXFP8 GEMM table (word scales,
# G110) two processes, 200 ms of load.
RUN_NAME=s50r1; source scripts/device_run_prelude.sh
left() { echo $((${RUN1_BUDGET_S:-560} - (SECONDS - T0))); }
S=docs/gpu_runs/2026-12-05-s49/scripts
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
(OUT=$L/a BUILD_DIR=build-ab .abtree/scripts/quick_build.sh bench_quantize > $L/build_a.txt 2>&1) &
pa=$!
mkdir -p $L/a
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dist_moe_gpu_tests bench_grouped_gemm || exit 1
wait $pa; cat $L/build_a.txt; grep -q "build OK" $L/build_a.txt || exit 1
echo "built at $((SECONDS-T0)) s"
A=.abtree/build-ab; B=build-gpu
timeout 100 $B/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*' > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
grep -E "^\[  FAILED|GroupsWithoutCounts" $L/tests_quant.log | head -8
for round in 1 2; do
  [ "$(left)" -gt 300 ] || break
  for side in A B; do
    d=$B; [ $side = A ] && d=$A
    timeout 100 $d/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_$side$round.log 2>&1
    echo "bench_quantize $side$round rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quantize_$side$round.log)"
  done
done
sed -n '/^python3 - \$L <<.PY.$/,/^PY$/p' $S/run1.sh | sed '1d;$d' > $L/ab.py && python3 $L/ab.py $L | tee $L/ab_table.txt | grep -E 'shape|fused'
for spec in qwen3_30b:mxfp8 qwen3_30b:fp8_blockwise mixtral:mxfp8; do
  IFS=: read -r shape fmt <<< "$spec"
  [ "$(left)" -gt 170 ] || break
  timeout 60 $B/dist-moe bench --shape $shape --mode train --format $fmt --no-baseline --iters 5 --sustain-ms 100 \
    > $L/layer_${shape}_$fmt.log 2>&1
  echo "layer $shape $fmt rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward\+backward|^BF16 layer forward\+backward' $L/layer_${shape}_$fmt.log | tr -s ' ' | tr '\n' ' ')"
done
for round in 1 2; do
  [ "$(left)" -gt 75 ] || break
  timeout 120 $B/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
    --rounds 2 --sustain-ms 200 --sweep-match _tma_dyn --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 \
    > $L/gemm_mxfp8_B$round.log 2>&1
  echo "gemm mxfp8 B$round rc=$? at $((SECONDS-T0)) s"
done
python3 - $L <<'PY'
import glob, re, sys, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(f"{sys.argv[1]}/gemm_mxfp8_B*.log")):
    for line in open(f):
        m = re.match(r"^fp8 (\S+)\s+\S+\s+(\S+)\s+(\S+)( \(pick\))?\s+([\d.]+) ms .* bf16\s+([\d.]+) ms\s+x bf16 ([\d.]+)", line)
        if m and m.group(4):
            rows[(m.group(1), m.group(2))].append((float(m.group(5)), float(m.group(6))))
met = 0
for (shape, op), v in rows.items():
    med = lambda xs: sorted(xs)[len(xs) // 2]
    q, bf = med([x[0] for x in v]), med([x[1] for x in v])
    met += bf / q >= 0.95
    print(f"{shape:13s} {op:16s} mxfp8 {q:7.3f} bf16 {bf:7.3f} x bf16 {bf / q:6.3f}")
print(f">= 0.95x our BF16: {met} of {len(rows)}")
PY
