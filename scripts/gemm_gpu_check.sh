#!/usr/bin/env bash
# GPU check of the SM90 grouped GEMMs (issue 5), run unattended on the H200 machine:
#   1. configure (NCCL from the torch venv) and build the GEMM targets with every core, ptxas -v on;
#   2. ptxas report of every GEMM kernel (registers, no stack frame, no spills);
#   3. SASS: HGMMA count of every GEMM kernel (cuobjdump);
#   4. GPU tests (GroupedGemm*: correctness vs the host reference, poison checks);
#   5. benchmark (ours, cuBLAS dense, HBM copy) and the torch._grouped_mm peer on the same counts;
#   6. a joined table: ours / cuBLAS, ours / torch, per shape, routing and op.
# Logs and CSVs go to $OUT (or ./gemm_gpu_check_out); the short table is printed last.
#
#   scripts/gemm_gpu_check.sh [--quick]      --quick: dsv3_prefill and dsv3_decode, balanced only
#   STEPS="build tests" scripts/gemm_gpu_check.sh   then   STEPS="bench peer" scripts/gemm_gpu_check.sh
#       runs a subset (default: build tests bench peer); a later subset reuses $BUILD_DIR and $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-$PWD/gemm_gpu_check_out}
BUILD_DIR=${BUILD_DIR:-build-gpu-gemm}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT_DIR"
export PATH=/usr/local/cuda/bin:$PATH
BENCH_ARGS=()
PEER_ARGS=()
if [ "${1:-}" = "--quick" ]; then
  BENCH_ARGS=(--shapes dsv3_prefill,dsv3_decode --routing balanced)
  PEER_ARGS=(--shapes dsv3_prefill,dsv3_decode --routing balanced)
fi

STEPS=${STEPS:-build tests bench peer}
want() { [[ " $STEPS " == *" $1 "* ]]; }
declare -A RESULT=([build]=SKIP [ptxas]=SKIP [sass]=SKIP [tests]=SKIP [bench]=SKIP [peer]=SKIP)
step() { echo; echo "=== $* ==="; }
have_binaries() { [ -x "$BUILD_DIR/tests/dist_moe_gpu_tests" ] && [ -x "$BUILD_DIR/bench/bench_grouped_gemm" ]; }

if want build; then
step "configure + build (-j$JOBS) -> $OUT_DIR/build.log"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT_DIR/gpu.txt"
# The ptxas report needs the GEMM objects to compile in this run.
touch src/kernels/grouped_gemm*.cu
if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" \
     -DDIST_MOE_PTXAS_VERBOSE=ON >"$OUT_DIR/configure.log" 2>&1 &&
   cmake --build "$BUILD_DIR" -j "$JOBS" --target dist_moe_cuda dist_moe_gpu_tests bench_grouped_gemm \
     >"$OUT_DIR/build.log" 2>&1; then
  RESULT[build]=PASS
else
  RESULT[build]=FAIL
  tail -40 "$OUT_DIR/build.log"
fi
echo "build: ${RESULT[build]}"

step "ptxas: registers, stack, spills -> $OUT_DIR/ptxas.txt"
if $PY scripts/gemm_ptxas_report.py "$OUT_DIR/build.log" >"$OUT_DIR/ptxas.txt" 2>&1; then RESULT[ptxas]=PASS; else RESULT[ptxas]=FAIL; fi
grep -c "C75[0-9][0-9]" "$OUT_DIR/build.log" >/dev/null && { echo "ptxas performance warnings (C75xx):"; grep "C75[0-9][0-9]" "$OUT_DIR/build.log" | sort -u | head; RESULT[ptxas]=FAIL; }
cat "$OUT_DIR/ptxas.txt"

step "SASS: HGMMA per GEMM kernel -> $OUT_DIR/sass_hgmma.txt"
if command -v cuobjdump >/dev/null && [ -f "$BUILD_DIR/libdist_moe_cuda.a" ]; then
  if cuobjdump -sass "$BUILD_DIR/libdist_moe_cuda.a" 2>/dev/null | $PY scripts/gemm_ptxas_report.py --sass >"$OUT_DIR/sass_hgmma.txt"; then
    RESULT[sass]=PASS
  else
    RESULT[sass]=FAIL
  fi
  cat "$OUT_DIR/sass_hgmma.txt"
else
  RESULT[sass]=SKIP
  echo "cuobjdump or the library is missing"
fi
fi  # build

if want tests; then
step "GPU tests (GroupedGemm*) -> $OUT_DIR/tests.log"
if have_binaries; then
  timeout 1500 "$BUILD_DIR/tests/dist_moe_gpu_tests" --gtest_filter='GroupedGemm*' >"$OUT_DIR/tests.log" 2>&1
  rc=$?
  RESULT[tests]=$([ $rc = 0 ] && echo PASS || echo "FAIL(rc=$rc)")
  skipped=$(grep -oE "^\[  SKIPPED \] [0-9]+ test" "$OUT_DIR/tests.log" | grep -oE "[0-9]+" || true)
  [ -n "$skipped" ] && RESULT[tests]="${RESULT[tests]} ($skipped SKIPPED: $(grep -m1 'skipped: ' "$OUT_DIR/tests.log"))"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]| FAIL$" "$OUT_DIR/tests.log" | tail -40
  echo "checks: $(grep -c ' PASS$' "$OUT_DIR/tests.log") PASS, $(grep -c ' FAIL$' "$OUT_DIR/tests.log") FAIL"
else
  echo "no binaries in $BUILD_DIR: run the build step first"
fi
fi  # tests

if want bench; then
step "benchmark -> $OUT_DIR/bench.log, grouped_gemm_bench.csv"
if have_binaries; then
  timeout 1500 "$BUILD_DIR/bench/bench_grouped_gemm" "${BENCH_ARGS[@]}" --csv "$OUT_DIR/grouped_gemm_bench.csv" \
    >"$OUT_DIR/bench.log" 2>&1
  rc=$?
  RESULT[bench]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
  tail -5 "$OUT_DIR/bench.log"
else
  echo "no binaries in $BUILD_DIR: run the build step first"
fi
fi  # bench

if want peer; then
step "torch._grouped_mm peer -> $OUT_DIR/peer.log, grouped_mm_peer.csv"
timeout 1500 $PY bench/grouped_mm_peer.py "${PEER_ARGS[@]}" --csv "$OUT_DIR/grouped_mm_peer.csv" >"$OUT_DIR/peer.log" 2>&1
rc=$?
RESULT[peer]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
tail -3 "$OUT_DIR/peer.log"
fi  # peer

step "joined table -> $OUT_DIR/summary.txt"
$PY - "$OUT_DIR/grouped_gemm_bench.csv" "$OUT_DIR/grouped_mm_peer.csv" >"$OUT_DIR/summary.txt" 2>&1 <<'PYEOF'
import csv, math, sys
def load(path):
    try:
        return list(csv.DictReader(open(path)))
    except OSError:
        return []
ours, peer = load(sys.argv[1]), load(sys.argv[2])
torch_tf = {(r["shape"], r["routing"], r["op"]): float(r["tflops"]) for r in peer if r["tflops"] not in ("nan", "")}
print(f"{'shape':13s} {'routing':8s} {'op':15s} {'config':22s} {'ms':>8s} {'TFLOP/s':>8s} {'x cuBLAS':>8s} {'x torch':>8s} {'other':>16s}")
met = total = 0
for r in ours:
    tf = float(r["tflops"])
    t = torch_tf.get((r["shape"], r["routing"], r["op"]))
    xt = tf / t if t else float("nan")
    xc, other = float("nan"), ""
    ok = True
    if r["kind"] == "compute":
        xc = tf / float(r["cublas_tflops"])
        ok = xc >= 0.80 and (t is None or xt >= 1.0 or r["op"].endswith("_fp32"))
    elif r["kind"] == "decode":
        bw = float(r["gbps"]) / float(r["copy_gbps"])
        other = f"HBM {bw:.2f}"
        ok = bw >= 0.80 and (t is None or xt >= 1.0)
    else:
        v = float(r["contiguous_ms"]) / float(r["ms"])
        other = f"vs contig {v:.2f}"
        ok = v >= 0.90
    met += ok
    total += 1
    fmt = lambda v: f"{'-':>8s}" if math.isnan(v) else f"{v:8.2f}"
    print(f"{r['shape']:13s} {r['routing']:8s} {r['op']:15s} {r['config']:22s} {float(r['ms']):8.3f} {tf:8.1f} "
          f"{fmt(xc)} {fmt(xt)} {other:>16s} {'MET' if ok else 'MISSED'}")
print(f"targets met: {met} of {total}  (compute: >= 0.80 x cuBLAS and >= 1.0 x torch; decode: >= 0.80 of HBM copy; "
      f"gather/scatter: >= 0.90 of contiguous)")
PYEOF
cat "$OUT_DIR/summary.txt"

echo
echo "=== grouped GEMM GPU check: summary ==="
printf '%-8s %s\n' build "${RESULT[build]}" ptxas "${RESULT[ptxas]}" sass "${RESULT[sass]}" tests "${RESULT[tests]}" \
  bench "${RESULT[bench]}" peer "${RESULT[peer]}"
tail -1 "$OUT_DIR/summary.txt"
echo "logs: $OUT_DIR"
