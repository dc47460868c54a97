#!/usr/bin/env bash
# On the 2-GPU machine: the backward's WGRAD/DGRAD overlap (docs/perf.md G33). Builds, runs the
# pipeline suite and the two-layer example with the default overlap, then layer A/Bs of the overlap
# off (DIST_MOE_WGRAD_OVERLAP_SMS=0) against each value of $SIDE_SMS, $ROUNDS interleaved rounds.
#   SHAPE=dsv3_prefill SIDE_SMS="66 33" ROUNDS=2 scripts/overlap_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/overlap}
mkdir -p "$OUT"
SHAPE=${SHAPE:-dsv3_prefill}
SIDE_SMS=${SIDE_SMS:-66}
ROUNDS=${ROUNDS:-2}
STAGES=${STAGES:-build tests ab}
export BUILD_DIR=${BUILD_DIR:-build-gpu} NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
has() { [[ " $STAGES " == *" $1 "* ]]; }
B=$BUILD_DIR
summary=()
if has build; then
  OUT="$OUT" scripts/quick_build.sh dist-moe dmoe_launch dist_moe_pipeline_tests two_layer_moe > "$OUT/build_line.txt" ||
    { cat "$OUT/build_line.txt"; exit 1; }
  summary+=("$(cat "$OUT/build_line.txt")")
fi
if has tests; then
  timeout 600 "$B/tests/dmoe_launch" -n 2 --timeout 500 -- "$B/tests/dist_moe_pipeline_tests" > "$OUT/pipeline.log" 2>&1
  summary+=("pipeline (rc=$?): $(grep -E 'ALL PASS|FAIL' "$OUT/pipeline.log" | head -4 | tr '\n' ' ')")
  timeout 300 "$B/tests/dmoe_launch" -n 2 --timeout 250 -- "$B/examples/two_layer_moe" >> "$OUT/pipeline.log" 2>&1
  summary+=("example (rc=$?): $(grep -E 'two-layer MoE' "$OUT/pipeline.log" | tr '\n' ' ')")
fi
if has ab; then
  for s in $SIDE_SMS; do
    OUT="$OUT/ab_$s" SHAPE=$SHAPE ROUNDS=$ROUNDS A_ENV="DIST_MOE_WGRAD_OVERLAP_SMS=0" \
      B_ENV="DIST_MOE_WGRAD_OVERLAP_SMS=$s" scripts/layer_ab.sh > "$OUT/ab_$s.txt" 2>&1
    summary+=("$(tail -3 "$OUT/ab_$s.txt")")
  done
fi
echo "=== overlap check: summary ==="
printf '%s\n' "${summary[@]}"
