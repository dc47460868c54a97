#!/usr/bin/env bash
# s62 r2: G133 A / B on any card. A = main (G131 + G131b: the staged 16-token expanded kernels' weight
# scales copied into each stage by producer warps 1-3; Mega loads them itself), B = this tree, with
# ../g133_tma_scales.patch applied: the TMA thread brings each stage's scales (staged and Mega, whose
# NVFP4 ring goes from five to four stages). On B: the NVFP4 / Mega / expand / quantizer gtests and the
# NVFP4 layer suite against the CPU oracle. Alternated: the decode GEMMs (one round), the staged layer and the Mega
# layer (against staged in its process) at dsv3_decode and qwen3_30b T = 128. On an H200 after that,
# issue #26's other rows: the MXFP8 decode layer and dsv3_prefill NVFP4 inference against our BF16.
RUN_NAME=s62r2; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s62
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/ab_trees.sh $PWD/$D/g133_tma_scales.patch \
  "dist-moe bench_grouped_gemm dist_moe_gpu_tests dmoe_launch dist_moe_nvfp4_pipeline_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 100
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' $L/suite_nvfp4.log | head -3 | tr '\n' ' ')"
for r in 1; do
  for side in A B; do
    for shape in dsv3_decode qwen3_30b; do
      [ "$(left)" -lt 260 ] && break 3
      extra="--iters 10"; [ $shape = qwen3_30b ] && extra="--tokens 128 --iters 20"
      f=$L/gemm_${shape}_$side$r.log
      timeout 60 $(arm_dir $side)/bench/bench_grouped_gemm --shapes $shape --ep 1 $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 > $f 2>&1
      echo "gemm $shape $side$r: $(bs_picks $f)"
    done
  done
done
decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50"
mega_lines='^(inference forward|staged layer|BF16 layer) '
ab_layer_rounds "mega dsv3_decode" 2 "$mega_lines" $decode --format nvfp4 --pipeline mega
ab_layer_rounds "mega qwen3 T128" 2 "$mega_lines" $t128 --pipeline mega
ab_layer_rounds "staged dsv3_decode" 1 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode --format nvfp4
if [[ $gpu == *H200* ]]; then
  arm_rounds "h200 mxfp8 dsv3_decode" 1 B '^(inference forward|BF16 layer) ' dist-moe bench $decode --format mxfp8
  ARM_TIMEOUT=90 arm_rounds "h200 nvfp4 dsv3_prefill" 1 B '^(inference forward|BF16 layer) ' dist-moe bench \
    --shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 100
fi
