#!/usr/bin/env bash
# GPU check of the SM90 grouped GEMMs (issue 5), run unattended on the H200 machine:
#   1. configure (NCCL from the torch venv) and build the GEMM targets with every core, ptxas -v on;
#   2. ptxas report of every GEMM kernel (registers, no stack frame, no spills, no C75xx warning);
#   3. SASS: HGMMA count of every GEMM kernel (cuobjdump);
#   4. GPU tests (GroupedGemm*: correctness vs the host reference, poison checks, device-side
#      offsets, CUDA-graph replay with new offsets);
#   5. benchmark (ours, cuBLAS dense, HBM copy; --sweep: every compiled configuration of every op)
#      and the torch._grouped_mm peer on the same counts;
#   6. a joined table: ours / cuBLAS, ours / torch, per shape, routing and op, then the sweep table
#      (which configuration wins where) and the geometric means the issue's targets name.
# $OUT (default ./gemm_gpu_check_out) receives exactly six files -- the device returns at most eight:
#   summary.txt     step results, the joined tables, build errors if any          (read this first)
#   ptxas_sass.txt  the ptxas report, C75xx warnings, HGMMA per kernel
#   tests.log       the GPU tests
#   bench.log       the benchmark, sweep lines included
#   peer.log        torch._grouped_mm
#   bench.csv       the benchmark's rows (kind compute / decode / variant / sweep)
# Everything else (configure and build logs, the peer CSV) stays in $WORK (default /tmp/gemm_gpu_check).
#
#   scripts/gemm_gpu_check.sh [--quick]      --quick: dsv3_prefill and dsv3_decode, balanced only
#   STEPS="build tests" scripts/gemm_gpu_check.sh   then   STEPS="bench peer" scripts/gemm_gpu_check.sh
#       runs a subset (default: build tests bench peer); a later subset reuses $BUILD_DIR and $WORK.
#   SWEEP=0 scripts/gemm_gpu_check.sh        benchmark without the configuration sweep
#   EP=8 scripts/gemm_gpu_check.sh            per-rank sizes of an EP-8 run (E/8 local experts; default 2),
#       ours and torch's alike: one GPU previews the GEMMs of a larger machine's ranks
#   ROUTING=balanced,random                   the routings benchmarked (default: all three)
#   SUSTAIN_MS=200 (default)                  every timed call first runs this long untimed, ours and
#       torch's alike, so both are measured at the sustained (power-limited) clocks
#   scripts/gemm_gpu_check.sh --ab            A/B of the experimental variants (docs/perf_history.md G8-G10) in
#       one short call: build, the GroupedGemm* tests (timeout $AB_TEST_TIMEOUT s, default 240),
#       the benchmark on $AB_SHAPES (default dsv3_prefill) with routing balanced,random,zipf and the
#       sweep (static, `_dyn` and deep-staging configurations side by side), then the same benchmark
#       with DMOE_GEMM_EXPERIMENTAL=1 (heuristic rows only) -> bench_exp.log, and an A/B table
#       (default pick vs experimental pick per routing and op) in summary.txt. No torch peer.
#       Six files: summary.txt ptxas_sass.txt tests.log bench.log bench.csv bench_exp.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-$PWD/gemm_gpu_check_out}
WORK=${WORK:-/tmp/gemm_gpu_check}
BUILD_DIR=${BUILD_DIR:-build-gpu-gemm}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
SWEEP=${SWEEP:-1}
mkdir -p "$OUT_DIR" "$WORK"
export PATH=/usr/local/cuda/bin:$PATH
BENCH_ARGS=()
PEER_ARGS=()
AB=0
TEST_TIMEOUT=1500
if [ "${1:-}" = "--quick" ]; then
  BENCH_ARGS=(--shapes dsv3_prefill,dsv3_decode --routing balanced)
  PEER_ARGS=(--shapes dsv3_prefill,dsv3_decode --routing balanced)
elif [ "${1:-}" = "--ab" ]; then
  AB=1
  TEST_TIMEOUT=${AB_TEST_TIMEOUT:-240}
  BENCH_ARGS=(--shapes "${AB_SHAPES:-dsv3_prefill}" --routing balanced,random,zipf)
  STEPS=${STEPS:-build tests bench abexp}
fi
[ "$SWEEP" = "1" ] && BENCH_ARGS+=(--sweep)
if [ -n "${EP:-}" ]; then BENCH_ARGS+=(--ep "$EP"); PEER_ARGS+=(--ep "$EP"); fi
if [ -n "${ROUTING:-}" ]; then BENCH_ARGS+=(--routing "$ROUTING"); PEER_ARGS+=(--routing "$ROUTING"); fi
# Every timed call (ours, cuBLAS, torch) first runs SUSTAIN_MS untimed: all at the same power-limited
# clocks (docs/perf_history.md G22; 0 = the old cold-start timing).
SUSTAIN_MS=${SUSTAIN_MS:-200}
BENCH_ARGS+=(--sustain-ms "$SUSTAIN_MS")
PEER_ARGS+=(--sustain-ms "$SUSTAIN_MS")

SUMMARY="$OUT_DIR/summary.txt"
REPORT="$OUT_DIR/ptxas_sass.txt"
STEPS=${STEPS:-build tests bench peer}
want() { [[ " $STEPS " == *" $1 "* ]]; }
declare -A RESULT=([build]=SKIP [ptxas]=SKIP [sass]=SKIP [tests]=SKIP [bench]=SKIP [peer]=SKIP [abexp]=SKIP)
step() { echo; echo "=== $* ==="; }
have_binaries() { [ -x "$BUILD_DIR/tests/dist_moe_gpu_tests" ] && [ -x "$BUILD_DIR/bench/bench_grouped_gemm" ]; }
: >"$SUMMARY"

if want build; then
step "configure + build (-j$JOBS) -> $WORK/build.log"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$WORK/gpu.txt"
# The ptxas report needs the GEMM objects to compile in this run.
touch src/gemm/grouped_gemm*.cu
start=$(date +%s)
if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" \
     -DDIST_MOE_PTXAS_VERBOSE=ON >"$WORK/configure.log" 2>&1 &&
   cmake --build "$BUILD_DIR" -j "$JOBS" --target dist_moe_gemm dist_moe_gpu_tests bench_grouped_gemm \
     >"$WORK/build.log" 2>&1; then
  RESULT[build]=PASS
else
  RESULT[build]=FAIL
  { echo "=== build FAILED: last lines of $WORK/configure.log and build.log ==="; tail -20 "$WORK/configure.log";
    grep -B2 -A12 -E "error|FAILED" "$WORK/build.log" | head -150; } >>"$SUMMARY"
  tail -40 "$WORK/build.log"
fi
echo "build: ${RESULT[build]} in $(( $(date +%s) - start )) s" | tee -a "$WORK/gpu.txt"

step "ptxas: registers, stack, spills -> $REPORT"
if $PY scripts/gemm_ptxas_report.py "$WORK/build.log" >"$REPORT" 2>&1; then RESULT[ptxas]=PASS; else RESULT[ptxas]=FAIL; fi
if grep -q "C75[0-9][0-9]" "$WORK/build.log"; then
  { echo "ptxas performance warnings (C75xx):"; grep "C75[0-9][0-9]" "$WORK/build.log" | sort -u | head -20; } >>"$REPORT"
  RESULT[ptxas]=FAIL
fi
cat "$REPORT"

step "SASS: HGMMA per GEMM kernel -> $REPORT"
if command -v cuobjdump >/dev/null && [ -f "$BUILD_DIR/libdist_moe_gemm.a" ]; then
  echo >>"$REPORT"
  if cuobjdump -sass "$BUILD_DIR/libdist_moe_gemm.a" 2>/dev/null | $PY scripts/gemm_ptxas_report.py --sass >"$WORK/sass.txt"; then
    RESULT[sass]=PASS
  else
    RESULT[sass]=FAIL
  fi
  cat "$WORK/sass.txt" | tee -a "$REPORT"
else
  RESULT[sass]=SKIP
  echo "cuobjdump or the library is missing" | tee -a "$REPORT"
fi
fi  # build

if want tests; then
step "GPU tests (GroupedGemm*) -> $OUT_DIR/tests.log"
if have_binaries; then
  timeout "$TEST_TIMEOUT" "$BUILD_DIR/tests/dist_moe_gpu_tests" --gtest_filter='GroupedGemm*' >"$OUT_DIR/tests.log" 2>&1
  rc=$?
  RESULT[tests]=$([ $rc = 0 ] && echo PASS || echo "FAIL(rc=$rc)")
  skipped=$(grep -oE "^\[  SKIPPED \] [0-9]+ test" "$OUT_DIR/tests.log" | grep -oE "[0-9]+" || true)
  [ -n "$skipped" ] && RESULT[tests]="${RESULT[tests]} ($skipped SKIPPED: $(grep -m1 'skipped: \|Skipped' "$OUT_DIR/tests.log"))"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]| FAIL$" "$OUT_DIR/tests.log" | tail -40
  echo "checks: $(grep -c ' PASS$' "$OUT_DIR/tests.log") PASS, $(grep -c ' FAIL$' "$OUT_DIR/tests.log") FAIL"
else
  echo "no binaries in $BUILD_DIR: run the build step first"
fi
fi  # tests

if want bench; then
step "benchmark -> $OUT_DIR/bench.log, bench.csv"
if have_binaries; then
  timeout 1500 "$BUILD_DIR/bench/bench_grouped_gemm" "${BENCH_ARGS[@]}" --csv "$OUT_DIR/bench.csv" \
    >"$OUT_DIR/bench.log" 2>&1
  rc=$?
  RESULT[bench]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
  tail -5 "$OUT_DIR/bench.log"
else
  echo "no binaries in $BUILD_DIR: run the build step first"
fi
fi  # bench

if want abexp; then
step "benchmark with DMOE_GEMM_EXPERIMENTAL=1 (heuristic rows) -> $OUT_DIR/bench_exp.log"
if have_binaries; then
  EXP_ARGS=()
  for a in "${BENCH_ARGS[@]}"; do [ "$a" != "--sweep" ] && EXP_ARGS+=("$a"); done
  DMOE_GEMM_EXPERIMENTAL=1 DMOE_PRINT_GEMM_CONFIG=1 timeout 600 "$BUILD_DIR/bench/bench_grouped_gemm" \
    "${EXP_ARGS[@]}" --csv "$WORK/bench_exp.csv" >"$OUT_DIR/bench_exp.log" 2>&1
  rc=$?
  RESULT[abexp]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
  tail -3 "$OUT_DIR/bench_exp.log"
else
  echo "no binaries in $BUILD_DIR: run the build step first"
fi
fi  # abexp

if want peer; then
step "torch._grouped_mm peer -> $OUT_DIR/peer.log"
timeout 1500 $PY bench/grouped_mm_peer.py "${PEER_ARGS[@]}" --csv "$WORK/grouped_mm_peer.csv" >"$OUT_DIR/peer.log" 2>&1
rc=$?
RESULT[peer]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
tail -3 "$OUT_DIR/peer.log"
fi  # peer

step "joined table -> $SUMMARY"
$PY - "$OUT_DIR/bench.csv" "$WORK/grouped_mm_peer.csv" >>"$SUMMARY" 2>&1 <<'PYEOF'
import csv, math, sys
from collections import defaultdict
def load(path):
    try:
        return list(csv.DictReader(open(path)))
    except OSError:
        return []
ours, peer = load(sys.argv[1]), load(sys.argv[2])
torch_tf = {(r["shape"], r["routing"], r["op"]): float(r["tflops"]) for r in peer if r["tflops"] not in ("nan", "")}
fmt = lambda v: f"{'-':>8s}" if v is None or math.isnan(v) else f"{v:8.2f}"

print(f"{'shape':13s} {'routing':8s} {'op':15s} {'config':27s} {'ms':>8s} {'TFLOP/s':>8s} {'x cuBLAS':>8s} {'x torch':>8s} {'other':>16s}")
met = total = 0
main = [r for r in ours if r["kind"] != "sweep"]
balanced = {(r["shape"], r["op"]): float(r["tflops"]) for r in main if r["routing"] == "balanced"}
xt_by_op = defaultdict(list)
for r in main:
    tf = float(r["tflops"])
    t = torch_tf.get((r["shape"], r["routing"], r["op"]))
    xt = tf / t if t else float("nan")
    xc, other = float("nan"), ""
    ok = True
    if r["kind"] == "compute":
        xc = tf / float(r["cublas_tflops"])
        ok = xc >= 0.80 and (t is None or xt >= 1.0 or r["op"].endswith("_fp32"))
        if r["routing"] in ("zipf", "random") and (r["shape"], r["op"]) in balanced:
            z = tf / balanced[(r["shape"], r["op"])]
            other = f"{r['routing'][:4]}/bal {z:.2f}"
            ok = ok and z >= 0.90
        if r["routing"] == "balanced" and t and not r["op"].endswith("_fp32") and r["shape"] != "dsv3_decode":
            xt_by_op[r["op"]].append(xt)
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
    print(f"{r['shape']:13s} {r['routing']:8s} {r['op']:15s} {r['config']:27s} {float(r['ms']):8.3f} {tf:8.1f} "
          f"{fmt(xc)} {fmt(xt)} {other:>16s} {'MET' if ok else 'MISSED'}")
print(f"targets met: {met} of {total}  (compute: >= 0.80 x cuBLAS, >= 1.0 x torch, zipf and random >= 0.90 x balanced; "
      f"decode: >= 0.80 of HBM copy; gather/scatter: >= 0.90 of contiguous)")
print("geometric mean of x torch over the balanced prefill shapes (target >= 1.10):")
for op, v in sorted(xt_by_op.items()):
    g = math.exp(sum(math.log(x) for x in v) / len(v))
    print(f"  {op:15s} {g:6.3f}  over {len(v)} shapes  {'MET' if g >= 1.10 else 'MISSED'}")

# Sweep: every configuration of every (shape, routing, op); '*' = fastest, '<' = the heuristic's pick.
sweep = defaultdict(list)
for r in ours:
    if r["op"] == "w13_fprop_noh1" or r["kind"] == "variant" and r["op"] != "w13_gather":
        continue
    sweep[(r["shape"], r["routing"], r["op"])].append(r)
if any(r["kind"] == "sweep" for r in ours):
    print()
    print("configuration sweep ('*' fastest, '<' heuristic):")
    print(f"{'shape':13s} {'routing':8s} {'op':15s} {'config':27s} {'ms':>8s} {'TFLOP/s':>8s} {'x cuBLAS':>8s} {'x torch':>8s}")
    wins = 0
    for key, rows in sweep.items():
        best = min(float(r["ms"]) for r in rows)
        heuristic = [r for r in rows if r["kind"] != "sweep"]
        h_ms = float(heuristic[0]["ms"]) if heuristic else float("nan")
        wins += h_ms <= best * 1.02
        t = torch_tf.get(key)
        for r in sorted(rows, key=lambda r: float(r["ms"])):
            tf = float(r["tflops"])
            cb = float(r["cublas_tflops"] or 0)
            mark = ("*" if float(r["ms"]) == best else " ") + ("<" if r["kind"] != "sweep" else " ")
            print(f"{key[0]:13s} {key[1]:8s} {key[2]:15s} {r['config']:27s} {float(r['ms']):8.3f} {tf:8.1f} "
                  f"{fmt(tf / cb if cb > 0 else None)} {fmt(tf / t if t else None)} {mark}")
    print(f"heuristic within 2% of the fastest configuration: {wins} of {len(sweep)}")
PYEOF

if [ -f "$WORK/bench_exp.csv" ] && want abexp; then
$PY - "$OUT_DIR/bench.csv" "$WORK/bench_exp.csv" >>"$SUMMARY" 2>&1 <<'PYEOF'
import csv, sys
def load(path):
    try:
        return [r for r in csv.DictReader(open(path)) if r["kind"] != "sweep"]
    except OSError:
        return []
base = {(r["shape"], r["routing"], r["op"]): r for r in load(sys.argv[1])}
exp = load(sys.argv[2])
print()
print("A/B: default heuristic vs DMOE_GEMM_EXPERIMENTAL=1 (ratio > 1: experimental faster)")
print(f"{'shape':13s} {'routing':8s} {'op':15s} {'default':27s} {'ms':>8s} {'experimental':31s} {'ms':>8s} {'ratio':>6s}")
bal = {}
for r in exp:
    if r["routing"] == "balanced":
        bal[(r["shape"], r["op"])] = float(r["ms"])
for r in exp:
    b = base.get((r["shape"], r["routing"], r["op"]))
    if b is None:
        continue
    bm, em = float(b["ms"]), float(r["ms"])
    tail = ""
    if r["routing"] != "balanced" and (r["shape"], r["op"]) in bal:
        tail = f"  exp {r['routing']}/bal {bal[(r['shape'], r['op'])] / em:.2f}"
    print(f"{r['shape']:13s} {r['routing']:8s} {r['op']:15s} {b['config']:27s} {bm:8.3f} {r['config']:31s} {em:8.3f} "
          f"{bm / em:6.2f}{tail}")
for shape in sorted({k[0] for k in base}):
    for routing in ("balanced", "random", "zipf"):
        ops = ("w13_fprop_noh1", "w2_fprop")
        d = [base.get((shape, routing, o)) for o in ops]
        e = [next((r for r in exp if (r["shape"], r["routing"], r["op"]) == (shape, routing, o)), None) for o in ops]
        if all(d) and all(e):
            print(f"{shape} {routing}: W13(noh1)+W2 forward default {sum(float(x['ms']) for x in d):.3f} ms, "
                  f"experimental {sum(float(x['ms']) for x in e):.3f} ms")
PYEOF
fi

{
  echo
  echo "=== grouped GEMM GPU check: summary ==="
  cat "$WORK/gpu.txt" 2>/dev/null
  printf '%-8s %s\n' build "${RESULT[build]}" ptxas "${RESULT[ptxas]}" sass "${RESULT[sass]}" tests "${RESULT[tests]}" \
    bench "${RESULT[bench]}" peer "${RESULT[peer]}" abexp "${RESULT[abexp]}"
  [ -f "$OUT_DIR/tests.log" ] && grep -E "^\[  FAILED  \]" "$OUT_DIR/tests.log" | head -20
  tail -1 "$REPORT" 2>/dev/null
} >>"$SUMMARY"
cat "$SUMMARY"
echo "logs: $OUT_DIR (6 files), intermediates: $WORK"
