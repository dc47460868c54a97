#!/usr/bin/env bash
# s62 r3 (HEAD: G131 + G131b + G133 and the epilogue's NVFP4 factor helpers): the whole GPU gtest suite
# (G133 gave every GEMM kernel one more operand map slot), then test_nvfp4.py and test_mega.py. On an
# H200 first, issue #26's table where it is judged: dsv3_decode NVFP4 staged and Mega against our BF16
# decode, the MXFP8 decode layer, the decode GEMMs against the copy, dsv3_prefill NVFP4 inference.
RUN_NAME=s62r3; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm dist_moe_gpu_tests dist_moe_torch dist_moe_native || exit 1
echo "built at $((SECONDS-T0)) s"
arm_dir() { echo build-gpu; }
if [[ $gpu == *H200* ]]; then
  decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
  arm_rounds "h200 nvfp4 staged" 1 T '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench $decode --format nvfp4
  arm_rounds "h200 nvfp4 mega" 1 T '^(inference forward|staged layer|BF16 layer) ' dist-moe bench $decode --format nvfp4 \
    --pipeline mega
  arm_rounds "h200 mxfp8" 1 T '^(inference forward|BF16 layer) ' dist-moe bench $decode --format mxfp8
  ARM_TIMEOUT=90 arm_rounds "h200 nvfp4 dsv3_prefill" 1 T '^(inference forward|BF16 layer) ' dist-moe bench \
    --shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 100
fi
gtests all '*' $(( $(left) - 110 ))
pytest_log test_nvfp4_mega $(( $(left) - 5 )) $PWD/tests/torch/test_nvfp4.py $PWD/tests/torch/test_mega.py
