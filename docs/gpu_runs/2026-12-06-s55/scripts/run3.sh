#!/usr/bin/env bash
# s55 r3 (NOT RUN in session 55: no machine came for it; main keeps r1's measured kernel): the _dq
# baseline after r2's profile (converting warps at ~0.2 instructions per cycle, the consumers waiting
# on full stages 64% of the samples), as ../dq_ilp.patch changes it: the chunks of a half loaded
# before any is converted (a shared load stayed behind every earlier shared store, one item at a
# time), no branch per item (item existence known at compile time, the scale's second factor always
# applied). The script applies the patch to the copy it runs on.
# (1) the MXFP8 GEMM gtests, (2) the same bench as r1 (ratios x our BF16 pick within this run),
# (3) test_mega's graphed test, fixed again (its loop variable shadowed the traced callable).
RUN_NAME=s55r3; source scripts/device_run_prelude.sh
patch -s -p1 --forward < docs/gpu_runs/2026-12-06-s55/dq_ilp.patch || { echo "dq_ilp.patch does not apply"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests bench_grouped_gemm dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
B=build-gpu
gtests mxfp8 '*Mxfp8*' 120
echo "of them _dq: $(grep -cE '^\[       OK .*_dq' $L/gtest_mxfp8.log) passed, $(grep -cE '^\[  FAILED .*_dq' $L/gtest_mxfp8.log) failed"
timeout 120 $B/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
  --rounds 2 --sustain-ms 100 --sweep-match _dq --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 \
  > $L/gemm_dq.log 2>&1
echo "gemm bench rc=$? at $((SECONDS-T0)) s"
export PYTHONPATH=$PWD/python
R=$PWD
(cd /tmp && timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE \
  "$R/tests/torch/test_mega.py::test_mega_training_is_traceable_and_graphable" > $L/fixed.log 2>&1)
echo "fixed test rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/fixed.log)"
grep -E "^(FAILED|ERROR)|^E  " $L/fixed.log | head -20
python3 - $L/gemm_dq.log <<'PY'
import re, sys
print(f"{'shape':13} {'op':16} {'bf16 ms':>8} {'config':34} {'ms':>8} {'x bf16':>7}")
for line in open(sys.argv[1]):
    m = re.match(r"^fp8 (\S+)\s+\S+\s+(\S+)\s+(\S+)( \(pick\))?\s+([\d.]+) ms .* bf16\s+([\d.]+) ms\s+x bf16 ([\d.]+)", line)
    if m:
        cfg = ("pick " if m.group(4) else "") + m.group(3)
        ms, bf16 = float(m.group(5)), float(m.group(6))
        print(f"{m.group(1):13} {m.group(2):16} {bf16:8.3f} {cfg:34} {ms:8.3f} {bf16 / ms:7.2f}")
PY
