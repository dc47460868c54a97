#!/usr/bin/env bash
# s54 r2, H200 only (the question cannot be asked on an H100, where NVFP4 decode is bandwidth-bound):
# does G119's unlanded MXFP8 / NVFP4 part (uniform wgmma descriptors in the NVFP4 / MXFP8 loops) speed
# up NVFP4 decode where it is conversion-bound (s50: 2.22x our BF16 decode on the H200)?
# A = main, B = main + docs/gpu_runs/2026-12-05-s53/g119_mxfp8_nvfp4_rest.patch; dsv3_decode NVFP4
# Mega (with the staged layer alternated in the same process) 3 rounds, the staged layer's stage
# rates 2 rounds, MXFP8 Mega decode 2 rounds; A and B alternated.
RUN_NAME=g119h200; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
P=docs/gpu_runs/2026-12-05-s53/g119_mxfp8_nvfp4_rest.patch
patch -s -p1 --forward < $P || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $P "dist-moe dmoe_launch" "dist-moe dmoe_launch" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
bench() {  # bench SIDE LOG args...: one layer measurement of side A (main) or B (main + the patch)
  local side=$1 f=$2; shift 2
  local b=build-gpu; [ "$side" = A ] && b=.abtree/build-ab
  timeout 60 $b/dist-moe bench --shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50 "$@" > "$f" 2>&1
}
rounds() {  # rounds LABEL N LINES-REGEX bench-args...: N rounds of A then B, each one line of the log
  local label=$1 n=$2 lines=$3; shift 3
  for r in $(seq 1 "$n"); do
    for side in A B; do
      [ "$(left)" -lt 40 ] && return
      local f=$L/${label// /_}_$side$r.log
      bench $side "$f" "$@"
      echo "$label $side$r: $(grep -E "$lines" "$f" | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
    done
  done
}
rounds "nvfp4 mega" 3 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' --format nvfp4 --pipeline mega
rounds "nvfp4 staged" 2 '^(inference forward) |^fwd:w(13|2) .*GB' --format nvfp4
rounds "mxfp8 mega" 2 '^(inference forward|staged layer) |^fwd:mega .*GB' --format mxfp8 --pipeline mega
