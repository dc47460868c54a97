#!/usr/bin/env bash
# s56 r3, H200 only (exits at once elsewhere): G119's MXFP8 / NVFP4 rest (s53's patch) A/B at
# dsv3_decode NVFP4, Mega and staged, within what device time is left.
RUN_NAME=s56r3; source scripts/device_run_prelude.sh
left() { echo $(( ${LIMIT:-230} - (SECONDS - T0) )); }  # the call runs under a shorter limit than 540 s
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[[ $gpu == *H200* ]] || { echo "not an H200: nothing to run"; exit 0; }
P=docs/gpu_runs/2026-12-05-s53/g119_mxfp8_nvfp4_rest.patch
patch -s -p1 --forward < $P || { echo "g119 patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $P "dist-moe dmoe_launch" "dist-moe dmoe_launch" || exit 1
echo "A/B built at $((SECONDS-T0)) s"
decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --format nvfp4 --pipeline mega
ab_layer_rounds "nvfp4 staged" 1 '^(inference forward) |^fwd:w(13|2) .*GB' $decode --format nvfp4
