#!/usr/bin/env bash
# s61 r4 (H200 only: exits at once elsewhere): the owed A / B of G126 + G128 where the NVFP4 decode
# loop is issue-bound. A = this tree without ../g128_code.patch and ../g126_code_at_s60_head.patch
# (s59's NVFP4 decode loop, 801 instructions per stage), B = this tree (622 in the staged kernels;
# Mega keeps per-lane descriptors: 689). The dsv3_decode NVFP4 layer staged and Mega against our BF16
# layer, the decode GEMMs at dsv3_decode EP1, alternated; then issue #24's quantizer table on B.
RUN_NAME=s61r4; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[[ $gpu == *H200* ]] || { echo "not an H200: nothing to run"; exit 0; }
D=docs/gpu_runs/2026-12-06-s61
reversed_tree .abtree build-ab $L/A "dist-moe bench_grouped_gemm" $D/g128_code.patch $D/g126_code_at_s60_head.patch ||
  exit 1
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm bench_quantize || exit 1
wait $REVERSED_TREE_PID || { tail -20 $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
ab_layer_rounds "nvfp4 staged" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --pipeline mega
for r in 1 2; do
  for side in A B; do
    [ "$(left)" -lt 150 ] && break 2
    f=$L/gemm_$side$r.log
    timeout 60 $(arm_dir $side)/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --routing balanced \
      --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
    echo "gemm $side$r: $(bs_picks $f)"
  done
done
if [ "$(left)" -gt 130 ]; then
  timeout 120 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize.log 2>&1
  echo "quantize rc=$?: $(grep 'of 32' $L/quantize.log)"; grep below $L/quantize.log
fi
