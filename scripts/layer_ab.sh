#!/usr/bin/env bash
# On the GPU machine: A/B of `dist-moe bench` (the fused layer on every local GPU) under two
# environments, interleaved A B A B ... so that clock drift under sustained load hits both sides
# alike. Prints each round's forward and forward+backward times, then the medians and B / A.
#   B_ENV="DMOE_GEMM_EXPERIMENTAL=1" SHAPE=dsv3_prefill ROUNDS=3 scripts/layer_ab.sh
# A_ENV / B_ENV: space-separated VAR=value assignments (empty: the defaults). BUILD_DIR: where
# dist-moe was built (default build-gpu); A_BUILD / B_BUILD: a build per side instead (an older
# source tree against this one: behaviour-unchanged refactors). Full logs: $OUT/layer_ab.log.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-/tmp/layer-ab}
SHAPE=${SHAPE:-dsv3_prefill}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-10}
MODE=${MODE:-train}
A_ENV=${A_ENV:-}
B_ENV=${B_ENV:-}
A_BUILD=${A_BUILD:-$BUILD}
B_BUILD=${B_BUILD:-$BUILD}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
LOG="$OUT/layer_ab.log"
: > "$LOG"
declare -a A_F A_FB B_F B_FB
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    envs=$A_ENV; bin=$A_BUILD; [ "$side" = B ] && envs=$B_ENV && bin=$B_BUILD
    echo "==== round $r side $side build $bin env [$envs]" >> "$LOG"
    text=$(env $envs timeout 300 "$bin/dist-moe" bench --shape "$SHAPE" --mode "$MODE" --iters "$ITERS" --no-baseline 2>&1)
    echo "$text" >> "$LOG"
    f=$(echo "$text" | awk '$1 == "forward" || ($1 == "inference" && $2 == "forward") {print ($1 == "forward" ? $2 : $3)}' | head -1)
    fb=$(echo "$text" | awk '$1 == "forward+backward" {print $2}' | head -1)
    echo "round $r $side: forward ${f:-?} ms, forward+backward ${fb:-?} ms"
    if [ "$side" = A ]; then A_F+=("${f:-nan}"); A_FB+=("${fb:-nan}"); else B_F+=("${f:-nan}"); B_FB+=("${fb:-nan}"); fi
  done
done
python3 - "${A_F[*]}" "${A_FB[*]}" "${B_F[*]}" "${B_FB[*]}" "$SHAPE" "$A_ENV" "$B_ENV" <<'PY'
import statistics, sys
def med(s):
    v = [float(x) for x in s.split() if x not in ("nan", "?")]
    return statistics.median(v) if v else float("nan")
af, afb, bf, bfb = (med(s) for s in sys.argv[1:5])
shape, a_env, b_env = sys.argv[5:8]
print(f"layer A/B {shape}: A [{a_env or 'defaults'}] vs B [{b_env or 'defaults'}], medians (A/B builds: see layer_ab.log)")
print(f"  forward          A {af:8.3f} ms  B {bf:8.3f} ms  B/A {bf / af if af == af and af > 0 else float('nan'):.3f}")
if afb == afb:
    print(f"  forward+backward A {afb:8.3f} ms  B {bfb:8.3f} ms  B/A {bfb / afb if afb > 0 else float('nan'):.3f}")
PY
