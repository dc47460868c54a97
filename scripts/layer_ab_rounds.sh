#!/usr/bin/env bash
# Alternated `dist-moe bench` runs of two builds (or one build under two environments), for the A / B
# of a layer change: ROUNDS rounds of A then B (clock drift under sustained load hits both sides
# alike); per round and side the forward (training or inference) and forward+backward times and the
# BF16 layer's speedup where the bench prints one, then the medians and B / A. Full outputs go to
# FULL_LOG. Used by gpu_check.sh's ab / treeab stages and by one-off run scripts.
#   scripts/layer_ab_rounds.sh LABEL A_DIR B_DIR ROUNDS FULL_LOG dist-moe-bench-flags...
#   e.g. scripts/layer_ab_rounds.sh qwen3_30b .abtree/build-ab build-gpu 2 /tmp/layer.log \
#          --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
# A_ENV / B_ENV: VAR=value words set for that side's runs (empty: the defaults). LAYER_AB_TIMEOUT
# [300]: seconds per run.
set -uo pipefail
[ $# -ge 5 ] || { sed -n 2,11p "$0"; exit 2; }
label=$1 a_dir=$2 b_dir=$3 rounds=$4 full=$5
shift 5
a_env=${A_ENV:-} b_env=${B_ENV:-}
af=() afb=() bf=() bfb=()
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    envs=$a_env dir=$a_dir
    [ "$side" = B ] && envs=$b_env dir=$b_dir
    echo "==== $label round $r side $side build $dir env [$envs]" >> "$full"
    # shellcheck disable=SC2086  # envs: VAR=value words
    text=$(env $envs timeout "${LAYER_AB_TIMEOUT:-300}" "$dir/dist-moe" bench "$@" 2>&1)
    echo "$text" >> "$full"
    f=$(echo "$text" | awk '$1 == "forward" || ($1 == "inference" && $2 == "forward") {print ($1 == "forward" ? $2 : $3)}' | head -1)
    fb=$(echo "$text" | awk '$1 == "forward+backward" {print $2}' | head -1)
    # The block-scaled runs' speedup over the BF16 layer timed beside them (training or inference).
    bf16=$(echo "$text" | awk '$1 == "BF16" && $2 == "layer" && ($3 == "forward+backward" || $3 == "inference") {print $5; exit}')
    echo "round $r $side: forward ${f:-?} ms, forward+backward ${fb:-?} ms${bf16:+ ($bf16 our BF16 layer)}"
    if [ "$side" = A ]; then af+=("${f:-nan}"); afb+=("${fb:-nan}"); else bf+=("${f:-nan}"); bfb+=("${fb:-nan}"); fi
  done
done
python3 - "${af[*]}" "${afb[*]}" "${bf[*]}" "${bfb[*]}" "$label" "$a_env" "$b_env" <<'PY'
import statistics, sys
def med(s):
    v = [float(x) for x in s.split() if x not in ("nan", "?")]
    return statistics.median(v) if v else float("nan")
af, afb, bf, bfb = (med(s) for s in sys.argv[1:5])
label, a_env, b_env = sys.argv[5:8]
print(f"layer A/B {label}: A [{a_env or 'defaults'}] vs B [{b_env or 'defaults'}], medians")
print(f"  forward          A {af:8.3f} ms  B {bf:8.3f} ms  B/A {bf / af if af == af and af > 0 else float('nan'):.3f}")
if afb == afb:
    print(f"  forward+backward A {afb:8.3f} ms  B {bfb:8.3f} ms  B/A {bfb / afb if afb > 0 else float('nan'):.3f}")
PY
