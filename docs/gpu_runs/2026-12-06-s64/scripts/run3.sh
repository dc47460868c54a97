#!/usr/bin/env bash
# s64 r3: issue #26's "must show" on HEAD, on whichever card comes (the device notes: an H100 serves
# for timings reported, the baseline rerun in the same run). Correctness: the NVFP4 GPU gtests, the
# NVFP4 layer suite against the CPU oracle (quantized rows and h2 bitwise, the oracle and upstream
# tolerances, the graph matrix, padding), test_nvfp4.py / test_prepare.py and the example through
# torch. Performance, our BF16 layer in the same process as each block-scaled one: the decode GEMMs
# against the copy rate (two rounds), the staged NVFP4 decode layer against our BF16 decode (two
# rounds), the MXFP8 decode layer (NVFP4 >= 1.3x it), dsv3_prefill NVFP4 inference (>= 0.9x BF16),
# then, with what is left, Mega at dsv3_decode and qwen3_30b T = 128 (issue #28's rows).
RUN_NAME=s64r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm dist_moe_gpu_tests dmoe_launch \
  dist_moe_nvfp4_pipeline_tests dist_moe_torch dist_moe_native || exit 1
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
nvfp4_suite B 200
BUDGET=$(( SECONDS - T0 + 80 )) torch_tests test_nvfp4 test_prepare 2> /dev/null | grep -v torch_rest
pytest_log example_block_scaled 60 "$PWD/tests/torch/test_examples_run.py" -k block_scaled_inference
gemm_pick_rounds dsv3_decode 2 B --shapes dsv3_decode --ep 1 --iters 10 --routing balanced \
  --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100
decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
arm_rounds "staged nvfp4 dsv3_decode" 2 B '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench \
  $decode --format nvfp4
arm_rounds "mxfp8 dsv3_decode" 1 B '^(inference forward|BF16 layer) ' dist-moe bench $decode --format mxfp8
ARM_TIMEOUT=90 arm_rounds "nvfp4 dsv3_prefill" 1 B '^(inference forward|BF16 layer) ' dist-moe bench \
  --shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 100
mega_lines='^(inference forward|staged layer|BF16 layer) '
arm_rounds "mega nvfp4 dsv3_decode" 1 B "$mega_lines" dist-moe bench $decode --format nvfp4 --pipeline mega
arm_rounds "mega nvfp4 qwen3 T128" 1 B "$mega_lines" dist-moe bench --shape qwen3_30b --tokens 128 --mode infer \
  --format nvfp4 --no-baseline --iters 20 --sustain-ms 50 --pipeline mega
