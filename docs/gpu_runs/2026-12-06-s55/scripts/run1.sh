#!/usr/bin/env bash
# s55 r1: issue #25 item 4's dequantize-to-BF16 baseline (mainloop_mxfp8_dequant.cuh, configurations
# "_dq"), then the torch tests s53 / s54 added (never run on a GPU yet) while time is left.
#  1. the MXFP8 GEMM gtests (the per-32 kernels and the new _dq ones: bitwise and accuracy cases,
#     FPROP, W13, DGRAD written and accumulated) and the kernel-table tests
#  2. bench_grouped_gemm, EP2 per-rank sizes of qwen3_30b / mixtral / dsv3_prefill, balanced rows:
#     our BF16 pick, the MXFP8 pick (per-32 promotion) and the _dq baseline, interleaved rounds
#  3. tests/torch: test_single_rank, test_mega, test_mxfp8, then the rest (s54's run1 list)
# Last: a table per shape and op (ms and x our BF16 pick).
RUN_NAME=s55r1; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests bench_grouped_gemm dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
B=build-gpu
gtests mxfp8 '*Mxfp8*:GemmKernelTable*' 150
echo "of them _dq: $(grep -cE '^\[       OK .*_dq' $L/gtest_mxfp8.log) passed, $(grep -cE '^\[  FAILED .*_dq' $L/gtest_mxfp8.log) failed"
budget=${BUDGET:-560}
[ $(( budget - (SECONDS - T0) )) -gt 150 ] && {
  timeout 140 $B/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
    --rounds 2 --sustain-ms 100 --sweep-match _dq --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 \
    > $L/gemm_dq.log 2>&1
  echo "gemm bench rc=$? at $((SECONDS-T0)) s"; }
BUDGET=$budget torch_tests test_single_rank test_mega test_mxfp8
python3 - $L/gemm_dq.log <<'PY'
import re, sys, collections
rows = collections.defaultdict(list)
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    m = re.match(r"^fp8 (\S+)\s+\S+\s+(\S+)\s+(\S+)( \(pick\))?\s+([\d.]+) ms .* bf16\s+([\d.]+) ms\s+x bf16 ([\d.]+)", line)
    if m:
        shape, op, cfg, pick, ms, bf16 = m.group(1), m.group(2), m.group(3), m.group(4), float(m.group(5)), float(m.group(6))
        rows[(shape, op)].append((("pick " + cfg) if pick else cfg, ms, bf16))
print(f"{'shape':13} {'op':16} {'bf16 ms':>8} {'config':34} {'ms':>8} {'x bf16':>7}")
for (shape, op), v in rows.items():
    for cfg, ms, bf16 in v:
        print(f"{shape:13} {op:16} {bf16:8.3f} {cfg:34} {ms:8.3f} {bf16 / ms:7.2f}")
PY
