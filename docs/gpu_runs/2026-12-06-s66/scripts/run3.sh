#!/usr/bin/env bash
# G141 A / B on any card (written in s66, not run): A = this tree, B = + ../g141_mega_early_epilogue_loads.patch
# (the Mega kernel's NVFP4 epilogue factors loaded once the tile's first stage is in, under the k loop,
# instead of at the epilogue's start). On B: the NVFP4 / Mega / expand gtests (Mega bitwise against the
# staged sequences) and the NVFP4 layer suite against the CPU oracle (Mega cases included). Then
# alternated: the NVFP4 Mega layer against the staged layer in the same process, dsv3_decode three rounds,
# qwen3_30b T = 128 two.
RUN_NAME=g141; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s66
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
ab_patch_trees $D/g141_mega_early_epilogue_loads.patch \
  "dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_nvfp4_pipeline_tests" "dist-moe"
gtests nvfp4 'GroupedGemmNvfp4*:Mega*:Nvfp4ExpandRows*' 120
nvfp4_suite B 200
mega_lines='^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB'
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50 --pipeline mega"
ab_layer_rounds "mega dsv3_decode" 3 "$mega_lines" $decode
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50 --pipeline mega"
ab_layer_rounds "mega qwen3 T128" 2 "$mega_lines" $t128
