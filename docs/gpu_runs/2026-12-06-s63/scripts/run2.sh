#!/usr/bin/env bash
# s63 r2: the whole GPU gtest suite on this tree (owed since G133 gave every GEMM kernel one more
# operand map slot; with G134's consumer loop when it is applied here), then, on an H200, the staged
# and Mega NVFP4 decode layers against our BF16 decode with what is left.
RUN_NAME=s63r2; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
git log --oneline -1; git status --short | head -5
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests dist-moe || exit 1
echo "built at $((SECONDS-T0)) s"
gtests all '*' 380
if [[ $gpu == *H200* ]]; then
  arm_dir() { echo build-gpu; }
  decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
  arm_rounds "h200 nvfp4 mega" 1 B '^(inference forward|staged layer|BF16 layer) ' dist-moe bench $decode --format nvfp4 \
    --pipeline mega
fi
