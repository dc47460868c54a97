#!/usr/bin/env bash
# s59 r3, H200 only (exits at once elsewhere): r2's H200 half -- G119's NVFP4 part A / B at
# dsv3_decode (GEMMs, then the staged and Mega layers against our BF16 layer; r2 got an H100) --
# then bench_quantize once more (r1: 18 of 32; three rows sit at 0.85).
RUN_NAME=s59r3; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[[ $gpu == *H200* ]] || { echo "not an H200: nothing to run"; exit 0; }
P=docs/gpu_runs/2026-12-06-s58/g119_nvfp4_over_s58.patch
patch -s -p1 --forward < $P || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $P "dist-moe bench_grouped_gemm bench_quantize" "dist-moe bench_grouped_gemm" ||
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
if [ "$(left)" -gt 120 ]; then
  timeout $(( $(left) - 10 )) build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 \
    --sustain-ms 100 > $L/quantize.log 2>&1
  echo "quantize rc=$?: $(grep 'of 32' $L/quantize.log)"; grep below $L/quantize.log
fi
