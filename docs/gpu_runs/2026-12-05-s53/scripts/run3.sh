#!/usr/bin/env bash
# G119 on the H200 (s53; run1 / run2 ran on an H100): A = main before G119, B = main + the MXFP8 / NVFP4 rest.
# NVFP4 dsv3_decode staged + Mega alternated A / B (3 rounds): on the H100 the decode kernels read
# weights at 89% of the copy rate and the patch did not help (Mega 3.7% slower); on the H200 NVFP4
# decode was conversion-bound (2.22x BF16), where fewer loop instructions should show. Then the
# FP8-blockwise GEMM picks at qwen3_30b (2 rounds) and the qwen3_30b FP8-blockwise training layer.
RUN_NAME=g119c; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
# main carries the FP8-blockwise part since s53; B adds the rest, A reverses the whole change
# (g119_whole_over_main.patch: main's FP8-blockwise part since fd627a4, then the rest).
patch -s -p1 --forward < docs/gpu_runs/2026-12-05-s53/g119_mxfp8_nvfp4_rest.patch || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh docs/gpu_runs/2026-12-05-s53/g119_whole_over_main.patch "dist-moe dmoe_launch bench_grouped_gemm" \
  "dist-moe dmoe_launch bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
for r in 1 2 3; do
  for side in A B; do
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    f=$L/nvfp4_decode_$side$r.log
    timeout 60 $b/dist-moe bench --shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 \
      --sustain-ms 50 --pipeline mega > $f 2>&1
    echo "nvfp4 dsv3_decode $side$r: $(grep -E '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
  done
done
for r in 1 2; do  # the staged layer alone: its W13 / W2 stages' weight rates
  for side in A B; do
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    f=$L/nvfp4_staged_$side$r.log
    timeout 60 $b/dist-moe bench --shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 \
      --sustain-ms 50 > $f 2>&1
    echo "nvfp4 staged $side$r: $(grep -E '^(inference forward) |^fwd:w(13|2) .*GB' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
  done
done
scripts/gemm_ab_rounds.sh .abtree/build-ab/bench/bench_grouped_gemm build-gpu/bench/bench_grouped_gemm 2 $L/gemm_rows.txt \
  --ep 2 --shapes qwen3_30b --routing balanced --sweep-match NONE \
  --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8,w13_fprop_mxfp8,w2_fprop_mxfp8 | tee $L/gemm_ab.txt
echo "gemm A/B done at $((SECONDS-T0)) s"
LAYER_AB_TIMEOUT=90 scripts/layer_ab_rounds.sh qwen3_30b_fp8bw .abtree/build-ab build-gpu 2 $L/layer_fp8bw.log \
  --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
