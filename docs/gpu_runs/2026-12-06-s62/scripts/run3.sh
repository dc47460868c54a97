#!/usr/bin/env bash
# s62 r3 (HEAD: G131 + G131b + G133 and the epilogue's NVFP4 factor helpers): the whole GPU gtest suite
# (G133 gave every GEMM kernel one more operand map slot), within what is left of the session's device
# time. On an H200 first, the dsv3_decode NVFP4 staged and Mega layers against our BF16 decode.
RUN_NAME=s62r3; source scripts/device_run_prelude.sh
left() { echo $((${RUN3_BUDGET_S:-270} - (SECONDS - T0))); }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
h200=0; [[ $gpu == *H200* ]] && h200=1
targets="dist_moe_gpu_tests"; [ $h200 = 1 ] && targets="$targets dist-moe"
OUT=$L scripts/quick_build.sh $targets || exit 1
echo "built at $((SECONDS-T0)) s"
if [ $h200 = 1 ]; then
  arm_dir() { echo build-gpu; }
  decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
  arm_rounds "h200 nvfp4 mega" 1 T '^(inference forward|staged layer|BF16 layer) ' dist-moe bench $decode --format nvfp4 \
    --pipeline mega
fi
gtests all '*' $(( $(left) - 5 ))
