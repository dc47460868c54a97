#!/usr/bin/env bash
# s60 r6: G126 at prefill sizes (issue #26's prefill row: NVFP4 inference >= 0.9x our BF16 layer at
# dsv3_prefill, one GPU's 256 experts), HEAD against main (A = ../g126_code.patch reversed), A / B
# alternated twice: the 128-token expanded tiles, whose loop G126 also shortens (815-842 -> 703-733
# instructions per stage). ~200 s of device time in all.
RUN_NAME=s60r6; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s60
OUT=$L scripts/ab_trees.sh $PWD/$D/g126_code.patch dist-moe dist-moe || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built A/B at $((SECONDS-T0)) s"
left() { echo $((240 - (SECONDS - T0))); }  # this session's last ~300 s of device time
prefill="--shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 50"
ARM_TIMEOUT=80 ab_layer_rounds "nvfp4 prefill" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) ' $prefill
