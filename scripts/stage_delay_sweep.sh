#!/usr/bin/env bash
# Ordering check of the BF16 pipeline between ranks: runs a multi-rank program (default: the
# two-layer example) once per (rank, stage) with DMOE_DEBUG_STAGE_DELAY making that rank late by
# DELAY_US after that stage, and prints one PASS/FAIL line per run (logs in $OUT/delay_*.log).
# A correct pipeline gives the same results however late any rank is at any point.
#   BUILD_DIR=build-gpu NPROC=2 DELAY_US=2000 scripts/stage_delay_sweep.sh [program args...]
set -uo pipefail
set -f  # the stage "*" is a word, not a glob
cd "$(dirname "$0")/.." || exit 1
BUILD_DIR=${BUILD_DIR:-build-gpu}
NPROC=${NPROC:-2}
DELAY_US=${DELAY_US:-2000}
OUT=${OUT:-/tmp/dmoe-out}
mkdir -p "$OUT"
PROGRAM=${PROGRAM:-$BUILD_DIR/examples/two_layer_moe}
STAGES=${STAGES:-"* publish+route plan w13 w2 reduce h2_from_saved_h1 topk_backward w2_dgrad w2_wgrad swiglu_backward w13_dgrad w13_wgrad reduce_grad_x recompute_w13 recompute_w2"}
pass=0 fail=0
run_one() {  # label, env value
  local label=$1 log="$OUT/delay_$(echo "$1" | tr -c 'A-Za-z0-9_\n' '_').log"
  DMOE_DEBUG_STAGE_DELAY="$2" timeout 300 "$BUILD_DIR/dmoe_launch" -n "$NPROC" --timeout 240 -- "$PROGRAM" "${@:3}" >"$log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then pass=$((pass + 1)); echo "PASS $label"; else
    fail=$((fail + 1)); echo "FAIL $label (rc=$rc): $(grep -E 'MISMATCH|FAIL|DistMoE|error' "$log" | head -3 | tr '\n' ' ' | cut -c1-300)"; fi
}
run_one "no delay" ""
for r in $(seq 0 $((NPROC - 1))); do
  for st in $STAGES; do run_one "rank $r late after $st" "$r:$st:$DELAY_US"; done
done
echo "stage delay sweep: $pass passed, $fail failed (delay $DELAY_US us, $NPROC ranks, $(basename "$PROGRAM"))"
