#!/usr/bin/env bash
# s60 r5, H200 only (exits at once elsewhere): G126 where it should show -- HEAD against main (A =
# ../g126_code.patch reversed) on the card whose NVFP4 decode GEMMs are issue-bound: the dsv3_decode
# NVFP4 layers staged and Mega against our BF16 layer, the decode GEMMs at dsv3_decode EP1, then issue
# #24's quantizer table on HEAD.
RUN_NAME=s60r5; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[[ $gpu == *H200* ]] || { echo "not an H200: nothing to run"; exit 0; }
D=docs/gpu_runs/2026-12-06-s60
OUT=$L scripts/ab_trees.sh $PWD/$D/g126_code.patch "dist-moe bench_grouped_gemm bench_quantize" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built A/B at $((SECONDS-T0)) s"
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
ab_layer_rounds "nvfp4 staged" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --pipeline mega
for r in 1 2; do
  for side in A B; do
    [ $((SECONDS - T0)) -gt 230 ] && break 2
    f=$L/gemm_$side$r.log
    timeout 60 $(arm_dir $side)/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --routing balanced \
      --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
    echo "gemm $side$r: $(bs_picks $f)"
  done
done
if [ $((SECONDS - T0)) -lt 170 ]; then  # the session's device time: ~300 s in all
  timeout 110 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 \
    --sustain-ms 100 > $L/quantize.log 2>&1
  echo "quantize rc=$?: $(grep 'of 32' $L/quantize.log)"; grep below $L/quantize.log
fi
