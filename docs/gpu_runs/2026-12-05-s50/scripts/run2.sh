#!/usr/bin/env bash
# s50 run 2 (the H200 if one comes): the tables s49 and s50 r1 took on H100s, on this tree (HEAD, G112
# dropped): quantizer GPU tests; bench_quantize twice (issue #24's table, best of the two); training
# layers qwen3_30b / mixtral MXFP8 and qwen3_30b FP8 blockwise against our BF16 layer (issues #25, #27);
# the dsv3_decode NVFP4 inference layer (issue #26); issue #25's MXFP8 GEMM table (word scales, G110),
# two processes, 200 ms of load.
RUN_NAME=s50r2; source scripts/device_run_prelude.sh
left() { echo $((${RUN2_BUDGET_S:-560} - (SECONDS - T0))); }
S=docs/gpu_runs/2026-12-05-s49/scripts
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dist_moe_gpu_tests bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
B=build-gpu
timeout 100 $B/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*' > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
grep -E "^\[  FAILED|GroupsWithoutCounts" $L/tests_quant.log | head -8
for round in 1 2; do
  timeout 100 $B/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize_B$round.log 2>&1
  echo "bench_quantize B$round rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quantize_B$round.log)"
done
python3 - $L <<'PY' | tee $L/quantize_table.txt | tail -1
import re, sys, collections
best = collections.OrderedDict()  # (shape, quantizer) -> (ms, copy ms) of the faster of the two runs
for r in (1, 2):
    summary = False
    for line in open(f"{sys.argv[1]}/quantize_B{r}.log"):
        summary = summary or line.startswith("summary")
        m = re.match(r"^(\S+) (\S+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x", line) if summary else None
        if m:
            k, v = (m.group(1), m.group(2)), (float(m.group(3)), float(m.group(4)))
            if k not in best or v[0] < best[k][0]: best[k] = v
met = 0
for (shape, q), (ms, copy) in best.items():
    met += copy / ms >= 0.85
    print(f"{shape:13s} {q:22s} {ms:8.4f} {copy:8.4f} {copy / ms:5.2f}x{'  below' if copy / ms < 0.85 else ''}")
print(f"best of two: {met} of {len(best)} quantizers at >= 0.85x the copy rate")
PY
for spec in qwen3_30b:mxfp8:train qwen3_30b:fp8_blockwise:train mixtral:mxfp8:train dsv3_decode:nvfp4:infer; do
  IFS=: read -r shape fmt mode <<< "$spec"
  [ "$(left)" -gt 170 ] || break
  timeout 60 $B/dist-moe bench --shape $shape --mode $mode --format $fmt --no-baseline --iters 5 --sustain-ms 100 \
    > $L/layer_${shape}_$fmt.log 2>&1
  echo "layer $shape $fmt rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward|^BF16 layer forward' $L/layer_${shape}_$fmt.log | tr -s ' ' | tr '\n' ' ')"
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
