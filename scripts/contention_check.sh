#!/usr/bin/env bash
# Runs the BF16 end-to-end programs while another process loads the same GPUs (the comm suite in a
# loop), so that ordering bugs that normal timing hides -- work on the legacy stream racing a
# non-blocking stream, a missing dependency between ranks -- show up as wrong results. Prints one
# line per run and a closing count; logs in $OUT/contention_*.log.
#   BUILD_DIR=build-gpu NPROC=2 RUNS=8 scripts/contention_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD_DIR=${BUILD_DIR:-build-gpu}
NPROC=${NPROC:-2}
RUNS=${RUNS:-8}
OUT=${OUT:-/tmp/dmoe-out}
mkdir -p "$OUT"
LAUNCH="$BUILD_DIR/dmoe_launch"
flag=$(mktemp)
( while [ -e "$flag" ]; do "$LAUNCH" -n "$NPROC" --timeout 300 -- "$BUILD_DIR/tests/dist_moe_comm_tests" >/dev/null 2>&1; done ) &
loader=$!
sleep 2
pass=0 fail=0
check() {  # label, log, command...
  local label=$1 log=$2; shift 2
  timeout 300 "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then pass=$((pass + 1)); echo "PASS $label"; else
    fail=$((fail + 1)); echo "FAIL $label (rc=$rc): $(grep -E 'MISMATCH|FAIL|DistMoE|error' "$log" | head -3 | tr '\n' ' ' | cut -c1-300)"; fi
}
for i in $(seq 1 "$RUNS"); do
  check "two-layer example, run $i" "$OUT/contention_example_$i.log" "$LAUNCH" -n "$NPROC" --timeout 240 -- "$BUILD_DIR/examples/two_layer_moe"
done
for i in 1 2; do
  check "pipeline suite, run $i" "$OUT/contention_pipeline_$i.log" "$LAUNCH" -n "$NPROC" --timeout 280 -- "$BUILD_DIR/tests/dist_moe_pipeline_tests"
done
rm -f "$flag"
wait "$loader"
echo "contention check: $pass passed, $fail failed (${RUNS} example runs + 2 pipeline suites beside a comm-suite loop)"
