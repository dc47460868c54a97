#!/usr/bin/env bash
# On the H200 machine: where does a grouped-GEMM op's time go? Builds the GEMM benchmark, runs an
# interleaved A/B of every configuration of the chosen ops (--rounds), then Nsight Compute on one
# launch of each kernel named in $PROFILE (and of cuBLAS's strided-batched kernel at the same
# per-expert shape), clocks left as they are. Logs go to $OUT (at most 8 files); a summary last.
#   OPS=w13_wgrad,w2_wgrad SHAPE=dsv3_prefill scripts/gemm_profile.sh
# $PROFILE: space-separated label=regex pairs over mangled kernel names (default: the WGRAD BF16
# cooperative 128x256 TMA-store kernel, its 2-CTA cluster twin `_c2`). The mainloop's template
# arguments end in <..., split, ping-pong, cluster>: `Lb0ELb0ELi1E` = cooperative, no cluster.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gemm-profile}
BUILD=${BUILD_DIR:-build-gpu}
SHAPE=${SHAPE:-dsv3_prefill}
OPS=${OPS:-w13_dgrad,w2_dgrad,w13_wgrad,w2_wgrad,w13_wgrad_fp32,w2_wgrad_fp32}
ROUNDS=${ROUNDS:-5}
PROFILE_OP=${PROFILE_OP:-w13_wgrad}
WG='GemmKindE2E'
BF16_TMA='NS0_13StoreEpilogueIS5_NS_7numeric6bf16_tENS0_18SwizzledTmaWriterNILi2E'
# PROFILE=none: the A/B only.
PROFILE=${PROFILE:-"coop=${WG}Li128ELi256ELi4ELb0ELb0ELi1EEE${BF16_TMA} c2=${WG}Li128ELi256ELi4ELb0ELb0ELi2EEE${BF16_TMA}"}
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

start=$(date +%s)
if ! { cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" > /tmp/profile_build.log 2>&1 &&
       cmake --build "$BUILD" -j "$(nproc)" --target bench_grouped_gemm >> /tmp/profile_build.log 2>&1; }; then
  say "build FAILED"; grep -E "error" /tmp/profile_build.log | head -20 | tee -a "$SUMMARY"; exit 1
fi
say "build: ok in $(( $(date +%s) - start )) s"
BENCH="$BUILD/bench/bench_grouped_gemm"

"$BENCH" --shapes "$SHAPE" --routing "${ROUTING:-balanced,random}" --ops "$OPS" --sweep --rounds "$ROUNDS" \
  --csv "$OUT/ab.csv" > "$OUT/ab.log" 2>&1
say "interleaved A/B ($ROUNDS rounds, rc=$?): $OUT/ab.log"
grep -E "^$SHAPE|^  sweep" "$OUT/ab.log" | sed 's/^  sweep /  * /' >> "$SUMMARY"

[ "$PROFILE" = none ] && PROFILE=""
# One profiled launch per kernel: the third match (after two warm-up calls) of its regex.
for pair in $PROFILE; do
  label=${pair%%=*}
  regex=${pair#*=}
  timeout 150 ncu --clock-control none --kernel-name-base mangled -k "regex:$regex" --launch-skip 2 --launch-count 1 \
    $SECTIONS "$BENCH" --shapes "$SHAPE" --routing balanced --ops "$PROFILE_OP" --sweep --iters 3 \
    > "$OUT/ncu_$label.txt" 2>&1
  say "ncu $label (rc=$?): $(grep -cE '^ +[A-Z]' "$OUT/ncu_$label.txt") metric lines"
done
# cuBLAS strided-batched at the same per-expert GEMMs (the benchmark's WGRAD reference; CUBLAS_NCU=0
# skips it).
[ "${CUBLAS_NCU:-1}" = "1" ] && timeout 150 ncu --clock-control none --kernel-name-base function -k "regex:nvjet|xmma|cutlass" --launch-skip 14 \
  --launch-count 1 $SECTIONS "$BENCH" --shapes "$SHAPE" --routing balanced --ops "$PROFILE_OP" --iters 3 \
  > "$OUT/ncu_cublas.txt" 2>&1
[ "${CUBLAS_NCU:-1}" = "1" ] && say "ncu cublas (rc=$?)"

for f in "$OUT"/ncu_*.txt; do
  say "---- $(basename "$f")"
  grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Dynamic Shared|Stall|Issued Ipc|Executed Ipc A|Warp Cycles Per Issued|Tensor|Block Size|Grid Size|L1/TEX Hit|L2 Hit" "$f" | head -40 >> "$SUMMARY"
done
echo "================ summary ================"; cat "$SUMMARY"
