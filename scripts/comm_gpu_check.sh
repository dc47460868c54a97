#!/usr/bin/env bash
# GPU check of the expert-parallel communication layer (issue 4), unattended on the 2x H200 machine:
#   1. configure (NCCL from the torch venv) and build the comm targets with every core;
#   2. CPU routing-table tests (Routing*);
#   3. comm correctness suite through dmoe_launch: 1 rank, then 2 ranks (bitwise vs the oracle,
#      CUDA-graph replays, T varying, both dispatch and combine modes);
#   4. failure scenarios (unequal T, capacity overflow, bad expert id, barrier timeout, and the first
#      three again through the fused publish_route_dispatch kernel): each must end with its diagnostic
#      line, a non-zero exit of the affected rank, and no illegal memory access;
#   5. the overflow scenario again under compute-sanitizer (memcheck);
#   6. bench_dispatch_combine (ours vs NVLink ceiling vs NCCL all-to-all; combine v1/v2 and v2 tuning
#      variants; fused route; reduce(); phase traces; SM sweep; targets).
# Logs go to $OUT (or ./comm_gpu_check_out), at most 7 files; the short results table is printed last.
#
#   scripts/comm_gpu_check.sh [--quick|--ab]
#     --quick: skip the SM sweep and qwen3/mixtral shapes
#     --ab:    as --quick, and run only the 2-rank correctness suite (no 1-rank suite, no failure
#              scenarios, no sanitizer): the short A/B run of the C5-C7 variants (~3 minutes)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT_DIR=${OUT:-$PWD/comm_gpu_check_out}
BUILD_DIR=${BUILD_DIR:-build-gpu-comm}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
JOBS=${JOBS:-$(nproc)}
NPROC=${NPROC:-2}
mkdir -p "$OUT_DIR"
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0            # never NVLink multicast on these machines
export LD_LIBRARY_PATH="$NCCL_ROOT/lib:${LD_LIBRARY_PATH:-}"
SHAPES_ALL="dsv3_prefill,dsv3_decode,qwen3_30b,mixtral"
SHAPES_QUICK="dsv3_prefill,dsv3_decode"
BENCH_ARGS=(--shape "$SHAPES_ALL")
AB=0
[ "${1:-}" = "--quick" ] && BENCH_ARGS=(--shape "$SHAPES_QUICK" --no-sweep)
[ "${1:-}" = "--ab" ] && { BENCH_ARGS=(--shape "$SHAPES_QUICK" --no-sweep); AB=1; }

declare -a ORDER
declare -A RESULT DETAIL
put() { ORDER+=("$1"); RESULT[$1]=$2; DETAIL[$1]=${3:-}; }
step() { echo; echo "=== $* ==="; }

step "configure + build (-j$JOBS) -> $OUT_DIR/build.log"
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  nvidia-smi topo -m
} >"$OUT_DIR/build.log" 2>&1
cat "$OUT_DIR/build.log"
if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" \
     >>"$OUT_DIR/build.log" 2>&1 &&
   cmake --build "$BUILD_DIR" -j "$JOBS" --target dmoe_launch dist_moe_comm_tests bench_dispatch_combine \
     dist_moe_cpu_tests >>"$OUT_DIR/build.log" 2>&1; then
  put build PASS
else
  put build FAIL "see build.log"
  tail -40 "$OUT_DIR/build.log"
fi
LAUNCH="$BUILD_DIR/dmoe_launch"
TESTS="$BUILD_DIR/tests/dist_moe_comm_tests"
BENCH="$BUILD_DIR/bench/bench_dispatch_combine"
built() { [ "${RESULT[build]}" = PASS ]; }

step "CPU routing-table tests -> $OUT_DIR/cpu_routing.log"
if built; then
  "$BUILD_DIR/tests/dist_moe_cpu_tests" --gtest_filter='Routing*' >"$OUT_DIR/cpu_routing.log" 2>&1
  rc=$?
  put cpu_routing_tables "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$(grep -E '^\[  (PASSED|FAILED)' "$OUT_DIR/cpu_routing.log" | head -2 | tr '\n' ' ')"
  tail -3 "$OUT_DIR/cpu_routing.log"
fi

step "comm correctness suite: 1 rank, then $NPROC ranks -> $OUT_DIR/comm_tests.log"
if built; then
  : >"$OUT_DIR/comm_tests.log"
  SUITE_RANKS=(1 "$NPROC")
  [ "$AB" = 1 ] && SUITE_RANKS=("$NPROC")
  for n in "${SUITE_RANKS[@]}"; do
    echo "##### dmoe_launch -n $n" >>"$OUT_DIR/comm_tests.log"
    "$LAUNCH" -n "$n" --timeout 900 -- "$TESTS" >"$OUT_DIR/tmp_suite.log" 2>&1
    rc=$?
    cat "$OUT_DIR/tmp_suite.log" >>"$OUT_DIR/comm_tests.log"
    summary=$(grep -E "ALL PASS|SOME FAILED|SKIP" "$OUT_DIR/tmp_suite.log" | head -1)
    if [ $rc = 0 ] && grep -q "ALL PASS" "$OUT_DIR/tmp_suite.log"; then v=PASS; else v="FAIL(rc=$rc)"; fi
    put "comm_suite_${n}rank" "$v" "$summary"
    grep -E "^\[rank 0\] (PASS|FAIL) |FAIL " "$OUT_DIR/tmp_suite.log" | head -60
  done
  rm -f "$OUT_DIR/tmp_suite.log"
fi

COMMON=(--timeout 300 --grace 60 --forbid-output "illegal memory access" --forbid-output "misaligned address"
        --forbid-output "UNEXPECTED")
scenario_args() {
  case $1 in
    unequal_t*) echo "--expect-fail 0 --expect-fail 1" ;;
    *) echo "--expect-fail 0" ;;
  esac
}
scenario_text() {
  case $1 in
    unequal_t*) echo "*:DistMoE token count mismatch" ;;
    overflow*) echo "0:DistMoE scratch capacity exceeded: rank 0 required_receive_rows: 128 total_scratch_capacity_rows: 16" ;;
    bad_id*) echo "0:DistMoE expert ID is outside [-1, num_experts)" ;;
    timeout) echo "0:DistMoE timeout: rank 0" ;;
    scores_mismatch) echo "0:DistMoE protocol error: rank 0 runs the rank-partials combine of call 1 with pushed scores" ;;
  esac
}

step "failure scenarios -> $OUT_DIR/traps.log"
if built && [ "$AB" = 1 ]; then
  put traps SKIP "--ab"
elif built; then
  : >"$OUT_DIR/traps.log"
  for sc in unequal_t overflow bad_id timeout unequal_t_fused overflow_fused bad_id_fused scores_mismatch; do
    echo "##### scenario $sc" >>"$OUT_DIR/traps.log"
    # shellcheck disable=SC2046
    "$LAUNCH" -n "$NPROC" "${COMMON[@]}" $(scenario_args $sc) --expect-output "$(scenario_text $sc)" \
      -- "$TESTS" --case "$sc" >>"$OUT_DIR/traps.log" 2>&1
    rc=$?
    put "trap_$sc" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$(scenario_text $sc | cut -d: -f2- | cut -c1-60)"
  done
  grep -E "^##### |DistMoE|\[launcher\] (expectation|PASS|FAIL)" "$OUT_DIR/traps.log" | head -100
fi

step "overflow scenario under compute-sanitizer (memcheck) -> $OUT_DIR/sanitizer.log"
if [ "$AB" = 1 ]; then
  put sanitizer_overflow SKIP "--ab"
elif built && command -v compute-sanitizer >/dev/null; then
  "$LAUNCH" -n "$NPROC" --timeout 900 --grace 300 --expect-fail 0 --expect-output "$(scenario_text overflow)" \
    --forbid-output "illegal memory access" --forbid-output "Invalid __global__" --forbid-output "Invalid __shared__" \
    --forbid-output "out of bounds" --forbid-output "misaligned address" \
    -- compute-sanitizer --tool memcheck --print-limit 50 "$TESTS" --case overflow >"$OUT_DIR/sanitizer.log" 2>&1
  rc=$?
  put sanitizer_overflow "$([ $rc = 0 ] && echo PASS || echo FAIL)" \
    "$(grep -E 'ERROR SUMMARY' "$OUT_DIR/sanitizer.log" | head -2 | tr '\n' ' ')"
  grep -E "DistMoE|ERROR SUMMARY|Invalid|\[launcher\] (expectation|PASS|FAIL)" "$OUT_DIR/sanitizer.log" | head -30
else
  put sanitizer_overflow SKIP "compute-sanitizer not found or build failed"
fi

step "benchmark -> $OUT_DIR/bench.log"
if built; then
  "$LAUNCH" -n "$NPROC" --timeout 1500 -- "$BENCH" "${BENCH_ARGS[@]}" >"$OUT_DIR/bench.log" 2>&1
  rc=$?
  put bench "$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")" ""
  while IFS= read -r line; do
    case $line in
      "[rank 0] PASS "*) put "target: ${line#\[rank 0\] PASS }" PASS "" ;;
      "[rank 0] FAIL "*) put "target: ${line#\[rank 0\] FAIL }" FAIL "" ;;
    esac
  done < <(grep -E "^\[rank 0\] (PASS|FAIL) " "$OUT_DIR/bench.log")
fi

{
  echo
  echo "==================== comm GPU check: results ===================="
  if [ -f "$OUT_DIR/bench.log" ]; then
    sed -n '/==== bench_dispatch_combine/,$p' "$OUT_DIR/bench.log" | sed 's/^\[rank 0\] //' | grep -v "^\[launcher\]"
    echo
  fi
  printf '%-72s %-8s %s\n' "step" "result" "detail"
  for k in "${ORDER[@]}"; do printf '%-72s %-8s %s\n' "${k:0:72}" "${RESULT[$k]}" "${DETAIL[$k]}"; done
} | tee "$OUT_DIR/summary.txt"
