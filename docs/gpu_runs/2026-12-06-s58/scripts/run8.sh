#!/usr/bin/env bash
# s58 r8: r7's two-rank worker rows (r7 got no machine), then on an H200 only, within what is left of
# the session's device time, r6's A / B (G119's NVFP4 part over today's main; r6 got no machine).
RUN_NAME=s58r8; source scripts/device_run_prelude.sh
left() { echo $(( ${LIMIT:-380} - (SECONDS - T0) )); }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
R=$PWD
pytest_log two_rank 240 "$R/tests/torch/test_two_rank.py"
[[ $gpu == *H200* ]] || exit 0
[ "$(left)" -gt 200 ] || { echo "H200, but too little time left for the A / B"; exit 0; }
D=docs/gpu_runs/2026-12-06-s58
patch -s -p1 --forward < $D/g119_nvfp4_over_s58.patch || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $D/g119_nvfp4_over_s58.patch "dist-moe" "dist-moe" || exit 1
echo "built A/B at $((SECONDS-T0)) s"
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
ab_layer_rounds "nvfp4 staged" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --pipeline mega
