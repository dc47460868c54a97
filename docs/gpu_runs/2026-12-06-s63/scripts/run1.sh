#!/usr/bin/env bash
# s63 r1: G134 A / B on any card, the whole GPU gtest suite on B, issue #26's H200 rows when the card
# is an H200. A = main (a52a176), B = this tree, with ../g134_hoist.patch applied: the NVFP4 swap-AB
# consumers keep their per-piece weight offsets and scale selector in registers across the k loop,
# form each piece's token-box descriptor from the stage's first, and convert two pieces' block scales
# at once (the decode loop 609 -> 556 instructions, Mega 674 / 650 -> 625 / 625). On B: every GPU
# gtest (owed since G133 gave every GEMM kernel one more operand map slot). Alternated: the
# dsv3_decode decode GEMMs against the copy rate, the staged NVFP4 layer against our BF16 decode, the
# Mega layer against staged in its process (dsv3_decode, qwen3_30b T = 128); on an H200 then issue
# #26's other rows on B (the MXFP8 decode layer, dsv3_prefill NVFP4 inference); last, with what is
# left, the NVFP4 layer suite on B.
RUN_NAME=s63r1; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s63
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/ab_trees.sh $PWD/$D/g134_hoist.patch \
  "dist-moe bench_grouped_gemm dist_moe_gpu_tests dmoe_launch dist_moe_nvfp4_pipeline_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests all '*' 330
for r in 1 2; do
  for side in A B; do
    [ "$(left)" -lt 230 ] && break 2
    f=$L/gemm_dsv3_decode_$side$r.log
    timeout 60 $(arm_dir $side)/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --iters 10 --routing balanced \
      --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 > $f 2>&1
    echo "gemm dsv3_decode $side$r: $(bs_picks $f)"
  done
done
decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50"
mega_lines='^(inference forward|staged layer|BF16 layer) '
ab_layer_rounds "staged dsv3_decode" 1 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode --format nvfp4
ab_layer_rounds "mega dsv3_decode" 1 "$mega_lines" $decode --format nvfp4 --pipeline mega
ab_layer_rounds "mega qwen3 T128" 1 "$mega_lines" $t128 --pipeline mega
if [[ $gpu == *H200* ]]; then
  arm_rounds "h200 mxfp8 dsv3_decode" 1 B '^(inference forward|BF16 layer) ' dist-moe bench $decode --format mxfp8
  ARM_TIMEOUT=90 arm_rounds "h200 nvfp4 dsv3_prefill" 1 B '^(inference forward|BF16 layer) ' dist-moe bench \
    --shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 100
fi
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) build-gpu/dmoe_launch -n 1 --timeout $(( $(left) - 20 )) -- \
    build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
  echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' $L/suite_nvfp4.log | head -3 | tr '\n' ' ')"
fi
