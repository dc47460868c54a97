#!/usr/bin/env bash
# s67, with ~250 s of device time left: G141 (s66's run3.sh) trimmed -- B's NVFP4 / Mega gtests (Mega
# bitwise against the staged sequences), then Mega against staged A / B (dsv3_decode two rounds,
# qwen3_30b T = 128 one), then B's NVFP4 layer suite only if time is left.
RUN_NAME=s67g141; source scripts/device_run_prelude.sh
S66=docs/gpu_runs/2026-12-06-s66
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
ab_patch_trees $S66/g141_mega_early_epilogue_loads.patch "dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_nvfp4_pipeline_tests" "dist-moe"
gtests nvfp4 'GroupedGemmNvfp4*:Mega*:Nvfp4ExpandRows*' 60
mega_lines='^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB'
ARM_TIMEOUT=30 ab_layer_rounds "mega dsv3_decode" 2 "$mega_lines" --shape dsv3_decode --mode infer --format nvfp4 \
  --no-baseline --iters 10 --sustain-ms 50 --pipeline mega
ARM_TIMEOUT=30 ab_layer_rounds "mega qwen3 T128" 1 "$mega_lines" --shape qwen3_30b --tokens 128 --mode infer \
  --format nvfp4 --no-baseline --iters 20 --sustain-ms 50 --pipeline mega
[ "$(left)" -gt 60 ] && nvfp4_suite B $(( $(left) - 10 ))
