#!/usr/bin/env bash
# A/B of source variants given as patches, on the GPU machine, sharing one build directory (only the
# translation units a patch touches recompile): builds the targets on the tree as it is ("base"),
# runs the command, then for each patch applies it, rebuilds, runs, and reverts it. Logs go to
# $OUT/ab_<name>.log; the last lines printed are one grep'd summary per variant. BASE=0 skips the
# unpatched run.
#   PATCHES="ab/prefetch.patch ab/warm.patch" TARGETS="dmoe_launch bench_dispatch_combine" \
#   GREP="combine.first|graph: combine rank partials" scripts/patch_ab.sh -- \
#     build-gpu/dmoe_launch -n 2 --timeout 300 -- build-gpu/bench/bench_dispatch_combine --shape dsv3_decode --no-sweep
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: PATCHES=... TARGETS=... [GREP=regex] $0 -- command..." >&2; exit 2; }
OUT=${OUT:-/tmp/patch_ab}
mkdir -p "$OUT"
TARGETS=${TARGETS:-dmoe_launch bench_dispatch_combine}
GREP=${GREP:-PASS|FAIL}

run_variant() {  # name
  local name=$1 log="$OUT/ab_$1.log"; shift
  # shellcheck disable=SC2086
  if ! OUT="$OUT" scripts/quick_build.sh $TARGETS >"$log" 2>&1; then
    echo "[$name] build FAILED"; tail -30 "$log"; return 1
  fi
  "$@" >>"$log" 2>&1
  echo "[$name] exit $?"
}

summary=()
[ "${BASE:-1}" = 1 ] && run_variant base "$@" && summary+=(base)
for p in ${PATCHES:-}; do
  name=$(basename "$p" .patch)
  if ! git apply "$p"; then echo "[$name] patch does not apply"; continue; fi
  run_variant "$name" "$@" && summary+=("$name")
  git apply -R "$p" || { echo "[$name] could not revert; stopping"; break; }
done
echo "==================== patch A/B: summary ===================="
for name in "${summary[@]}"; do
  echo "--- $name"
  grep -E "$GREP" "$OUT/ab_$name.log" | sed 's/^\[rank 0\] //' | grep -v '^\[rank [1-9]' | head -20
done
