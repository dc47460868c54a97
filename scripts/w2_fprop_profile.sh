#!/usr/bin/env bash
# On the H200 machine: Nsight Compute on one launch of our W2 FPROP (dsv3_prefill, balanced rows)
# and of torch._grouped_mm on the same groups (the peer that beats it: docs/perf.md G22), the kernel
# names (tile, cluster, schedule of torch's CUTLASS kernel) and the usual sections. Logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/w2-profile}
BUILD=${BUILD_DIR:-build-gpu}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUT"
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" > "$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target bench_grouped_gemm >> "$OUT/build.log" 2>&1 || { echo "build FAILED"; exit 1; }
timeout 200 ncu --clock-control none -k "regex:sm90_grouped_gemm" --launch-skip 2 --launch-count 1 $SECTIONS \
  "$BUILD/bench/bench_grouped_gemm" --shapes dsv3_prefill --routing balanced --ops w2_fprop --iters 3 > "$OUT/ncu_ours.txt" 2>&1
echo "ncu ours rc=$?"
cat > /tmp/w2_peer.py <<'PY'
import torch
E, M, D, F = 128, 32768, 7168, 2048   # dsv3_prefill per rank at EP2, balanced: 256 rows per expert
x = torch.randn(M, F, dtype=torch.bfloat16, device="cuda")
w = torch.randn(E, D, F, dtype=torch.bfloat16, device="cuda")
offs = (torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * (M // E)).contiguous()
for _ in range(3):
    y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
torch.cuda.synchronize()
print("peer ok", tuple(y.shape))
PY
timeout 200 ncu --clock-control none -k "regex:(?i)gemm|cutlass|grouped" --launch-skip 2 --launch-count 1 $SECTIONS \
  /opt/torch/.venv/bin/python3 /tmp/w2_peer.py > "$OUT/ncu_torch.txt" 2>&1
echo "ncu torch rc=$?"
for f in ours torch; do
  echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|SM Throughput|Compute \(SM\)|DRAM Throughput|L2 Hit Rate|L1/TEX Hit|Executed Ipc Active|Issue Slots Busy|Registers Per|Dynamic Shared|Block Size|Grid Size|Cluster|Achieved Occupancy|Warp Cycles Per Issued|No Eligible|Memory Throughput" "$OUT/ncu_$f.txt" | head -40
done
