#!/usr/bin/env bash
# On the H200 machine: our W2 FPROP (dsv3_prefill, balanced) and torch._grouped_mm on the same
# groups, each run for ~2 s back to back, with the SM clock and power sampled every 20 ms
# (nvidia-smi): does one of them throttle more under sustained load? (docs/perf.md G22)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-/tmp/w2-sustained}
mkdir -p "$OUT"
sample() {  # $1: label; samples until the caller kills it
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 20 > "$OUT/smi_$1.csv" &
  echo $!
}
cat > /tmp/w2_sustained_peer.py <<'PY'
import sys, torch
E, M, D, F = 128, 32768, 7168, 2048
iters = int(sys.argv[1])
x = torch.randn(M, F, dtype=torch.bfloat16, device="cuda")
w = torch.randn(E, D, F, dtype=torch.bfloat16, device="cuda")
offs = (torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * (M // E)).contiguous()
for _ in range(5):
    torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
times = []
for r in range(iters // 20):
    s.record()
    for _ in range(20):
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    e.record()
    torch.cuda.synchronize()
    times.append(s.elapsed_time(e) / 20)
print("torch w2_fprop ms per call, per block of 20:", " ".join(f"{t:.3f}" for t in times))
PY
for who in ours torch ours torch; do
  pid=$(sample "$who")
  if [ "$who" = ours ]; then
    "$BUILD/bench/bench_grouped_gemm" --shapes dsv3_prefill --routing balanced --ops w2_fprop --iters 1200 2>&1 | grep -E "w2_fprop" | head -2 >> "$OUT/times.txt"
  else
    /opt/torch/.venv/bin/python3 /tmp/w2_sustained_peer.py 1200 >> "$OUT/times.txt" 2>&1
  fi
  kill "$pid"; wait "$pid" 2>/dev/null
  awk -F', ' -v w="$who" '{gsub(/ MHz| W| /,"",$2); gsub(/ W/,"",$3); c+=$2; p+=$3; n++; if ($2<mc||mc==0) mc=$2} END {printf "%s: %d samples, mean SM clock %.0f MHz (min %d), mean power %.0f W\n", w, n, c/n, mc, p/n}' "$OUT/smi_$who.csv" >> "$OUT/times.txt"
  sleep 3
done
cat "$OUT/times.txt"
