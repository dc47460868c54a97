#!/usr/bin/env bash
# s58 r6, H200 only (exits at once elsewhere): G119's NVFP4 part over today's main
# (../g119_nvfp4_over_s58.patch: the shared memory base and stage made warp-uniform, so the token
# boxes' descriptors are built in uniform registers: 801 -> 734 loop instructions per stage) A / B on
# the conversion-bound H200: NVFP4 decode GEMMs at dsv3_decode EP1, then the NVFP4 decode layer,
# staged and Mega, against our BF16 layer (issue #26's 2.5x).
RUN_NAME=s58r6; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[[ $gpu == *H200* ]] || { echo "not an H200: nothing to run"; exit 0; }
D=docs/gpu_runs/2026-12-06-s58
patch -s -p1 --forward < $D/g119_nvfp4_over_s58.patch || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $D/g119_nvfp4_over_s58.patch "dist-moe bench_grouped_gemm" "dist-moe bench_grouped_gemm" ||
  { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built A/B at $((SECONDS-T0)) s"
for r in 1 2; do
  for side in A B; do
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    f=$L/gemm_$side$r.log
    timeout 60 $b/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --routing balanced \
      --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
    echo "gemm $side$r: $(bs_picks $f)"
  done
done
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
ab_layer_rounds "nvfp4 staged" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --pipeline mega
