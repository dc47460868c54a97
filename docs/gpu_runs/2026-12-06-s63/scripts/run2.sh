#!/usr/bin/env bash
# s63 r2 (an H200 if one comes): issue #26's rows on HEAD (G134 kept), and G134 A / B on that card.
# A = HEAD with ../g134_as_on_main.patch reversed (G133's consumer loop: the three headers as they
# were at a52a176; ../g134_hoist.patch, what r1 measured, no longer reverses after e0a0db0's move),
# B = HEAD. Alternated: the dsv3_decode NVFP4 decode GEMMs against the copy rate (two rounds), the
# staged NVFP4 decode layer against our BF16 decode (two rounds), the Mega layer against staged in
# its process. On B: our MXFP8 decode layer against our BF16 decode (issue #26: NVFP4 >= 1.3x MXFP8),
# dsv3_prefill NVFP4 inference against our BF16 inference (>= 0.9x).
RUN_NAME=s63r2; source scripts/device_run_prelude.sh
left() { echo $((${RUN2_BUDGET_S:-500} - (SECONDS - T0))); }
D=docs/gpu_runs/2026-12-06-s63
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/ab_trees.sh $PWD/$D/g134_as_on_main.patch "dist-moe bench_grouped_gemm" "dist-moe bench_grouped_gemm" ||
  { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gemm_pick_rounds dsv3_decode 2 "A B" --shapes dsv3_decode --ep 1 --iters 10 --routing balanced \
  --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100
decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
ab_layer_rounds "staged dsv3_decode" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode --format nvfp4
arm_rounds "mxfp8 dsv3_decode" 1 B '^(inference forward|BF16 layer) ' dist-moe bench $decode --format mxfp8
ab_layer_rounds "mega dsv3_decode" 1 '^(inference forward|staged layer|BF16 layer) ' $decode --format nvfp4 --pipeline mega
ARM_TIMEOUT=90 arm_rounds "nvfp4 dsv3_prefill" 1 B '^(inference forward|BF16 layer) ' dist-moe bench \
  --shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 100
