#!/usr/bin/env bash
# On the H200 machine: where do a GEMM kernel's warps wait? Builds the GEMM benchmark, runs Nsight
# Compute on one launch of the kernel whose mangled name matches $KERNEL (inside a benchmark run of
# $OPS at $SHAPE, balanced routing) with the warp-state and source-counter sections and every
# pc-sampling stall reason, and dumps the kernel's SASS. Logs to $OUT: ncu_stalls.txt, sass.txt.
#   KERNEL='GemmKindE2ELi128ELi256ELi4ELb0ELb0ELi1EEE' OPS=w13_wgrad scripts/ncu_stalls.sh
# (mangled mainloop arguments: <kind, BM, BN, stages, split, ping-pong, cluster>; kind 0 FPROP,
# 1 DGRAD, 2 WGRAD). The default is the BF16 WGRAD cooperative 128x256 TMA-store kernel.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ncu-stalls}
BUILD=${BUILD_DIR:-build-gpu}
SHAPE=${SHAPE:-dsv3_prefill}
OPS=${OPS:-w13_wgrad}
KERNEL=${KERNEL:-GemmKindE2ELi128ELi256ELi4ELb0ELb0ELi1EEENS0_13StoreEpilogueIS5_NS_7numeric6bf16_tENS0_18SwizzledTmaWriterNILi2E}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" > /tmp/ncu_cfg.log 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target bench_grouped_gemm > /tmp/ncu_build.log 2>&1 ||
  { echo "build FAILED"; tail -20 /tmp/ncu_build.log; exit 1; }
reasons=""
for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping mio_throttle short_scoreboard selected \
         dispatch_stall no_instructions misc lg_throttle drain branch_resolving; do
  reasons+="${reasons:+,}smsp__pcsamp_warps_issue_stalled_$r"
done
timeout 200 ncu --clock-control none --kernel-name-base mangled --print-kernel-base mangled -k "regex:$KERNEL" --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --print-details all --metrics "$reasons" \
  "$BUILD/bench/bench_grouped_gemm" --shapes "$SHAPE" --routing balanced --ops "$OPS" --sweep --iters 3 \
  > "$OUT/ncu_stalls.txt" 2>&1
echo "ncu rc=$?"
grep -E "^    Stall " "$OUT/ncu_stalls.txt" | sort -k3 -rn | head -12
name=$(grep -oE "_ZN8dist_moe4gemm17sm90_grouped_gemm\S*${KERNEL}\S*ParamsE" "$OUT/ncu_stalls.txt" | head -1)
[ -n "$name" ] && cuobjdump -sass -fun "$name" "$BUILD/libdist_moe_gemm.a" > "$OUT/sass.txt" 2>&1
echo "sass: $(wc -l < "$OUT/sass.txt" 2>/dev/null || echo 0) lines"
