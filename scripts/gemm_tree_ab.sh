#!/usr/bin/env bash
# On the GPU machine: A/B of the grouped GEMM benchmark between two source trees -- A, an older
# tree unpacked into an ignored folder (default .abtree: `git archive BASE | tar -x -C .abtree`,
# carried with the call), and B, this checkout -- for device-code changes that no environment
# variable can switch. Builds bench_grouped_gemm in both, then runs them interleaved A B A B ...
# (ROUNDS times, each call with --sustain-ms so both start from the power-limited state) and prints
# per shape, routing and op the median time of each side, B / A, and B's ratio to cuBLAS dense.
#   A_TREE=.abtree SHAPES=qwen3_30b OPS=w13_fprop,w13_fprop_noh1 ROUTING=balanced,random scripts/gemm_tree_ab.sh
# Logs: $OUT/tree_ab_build_{a,b}.log, $OUT/tree_ab.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tree-ab}
A_TREE=${A_TREE:-.abtree}
SHAPES=${SHAPES:-qwen3_30b}
OPS=${OPS:-w13_fprop,w13_fprop_noh1,w13_gather}
ROUTING=${ROUTING:-balanced,random}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-10}
SUSTAIN=${SUSTAIN:-200}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUT"
[ -f "$A_TREE/CMakeLists.txt" ] || { echo "no source tree in $A_TREE"; exit 1; }

build() {  # build <source dir> <build dir> <log>
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" > "$3" 2>&1 &&
    cmake --build "$2" -j "$(nproc)" --target bench_grouped_gemm >> "$3" 2>&1
}
start=$(date +%s)
build "$A_TREE" "$A_TREE/build-ab" "$OUT/tree_ab_build_a.log" || { echo "A build FAILED"; tail -20 "$OUT/tree_ab_build_a.log"; exit 1; }
build . build-gpu "$OUT/tree_ab_build_b.log" || { echo "B build FAILED"; tail -20 "$OUT/tree_ab_build_b.log"; exit 1; }
echo "builds OK ($(( $(date +%s) - start )) s)"

LOG="$OUT/tree_ab.log"
: > "$LOG"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=build-gpu/bench/bench_grouped_gemm
    [ "$side" = A ] && bin="$A_TREE/build-ab/bench/bench_grouped_gemm"
    echo "==== round $r side $side" >> "$LOG"
    timeout 300 "$bin" --shapes "$SHAPES" --ops "$OPS" --routing "$ROUTING" --iters "$ITERS" \
      --sustain-ms "$SUSTAIN" 2>&1 | awk -v side="$side" -v r="$r" '$6 == "ms" && $8 == "TFLOP/s" {print "ROW", side, r, $0}' >> "$LOG"
  done
  echo "round $r done ($(( $(date +%s) - start )) s)"
done
python3 - "$LOG" <<'PY'
import collections, statistics, sys
# ROW side round shape routing op config ms "ms" tflops "TFLOP/s" [cuBLAS tflops ...]
ms, tflops, cublas = (collections.defaultdict(list) for _ in range(3))
for line in open(sys.argv[1]):
    f = line.split()
    if not f or f[0] != "ROW":
        continue
    key = (f[1],) + tuple(f[3:6])
    ms[key].append(float(f[7]))
    tflops[key].append(float(f[9]))
    if "cuBLAS" in f:
        cublas[key].append(float(f[f.index("cuBLAS") + 1]))
med = statistics.median
print(f"{'shape':13s} {'routing':8s} {'op':16s} {'A ms':>7s} {'B ms':>7s} {'B/A':>6s} {'B x cuBLAS':>10s}")
for k in sorted({k[1:] for k in ms}):
    a, b = ("A",) + k, ("B",) + k
    if not ms[a] or not ms[b]:
        continue
    cb = f"{med(tflops[b]) / med(cublas[b]):.3f}" if cublas[b] else "-"
    print(f"{k[0]:13s} {k[1]:8s} {k[2]:16s} {med(ms[a]):7.3f} {med(ms[b]):7.3f} {med(ms[b]) / med(ms[a]):6.3f} {cb:>10s}")
PY
