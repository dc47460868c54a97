#!/usr/bin/env bash
# s64 r5, by card. On an H200: issue #26's rows on HEAD (the H200 has not measured them since s50,
# before G126-G134): the NVFP4 GPU gtests and layer suite, the decode GEMMs against the copy rate, the
# staged NVFP4 decode layer against our BF16 decode (two rounds), the MXFP8 decode layer, dsv3_prefill
# NVFP4 inference, Mega at dsv3_decode; then issue #24's quantizer table once. On an H100 (r3 took
# issue #26's rows there): issue #24's quantizer table on HEAD, two processes (the last whole H100
# table is s50's, before G126), with the quantizer GPU tests.
RUN_NAME=s64r5; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
quant_table() {
  local f=$L/quantize_B$1.log
  timeout 100 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $f 2>&1
  echo "bench_quantize B$1 rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $f)"
  grep -E ' below$' $f | sed 's/^/  /'
}
if [[ $gpu == *H200* ]]; then
  OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm bench_quantize dist_moe_gpu_tests dmoe_launch \
    dist_moe_nvfp4_pipeline_tests || exit 1
  echo "built at $((SECONDS-T0)) s"
  gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
  nvfp4_suite B 200
  gemm_pick_rounds dsv3_decode 2 B --shapes dsv3_decode --ep 1 --iters 10 --routing balanced \
    --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100
  decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
  arm_rounds "staged nvfp4 dsv3_decode" 2 B '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench \
    $decode --format nvfp4
  arm_rounds "mxfp8 dsv3_decode" 1 B '^(inference forward|BF16 layer) ' dist-moe bench $decode --format mxfp8
  ARM_TIMEOUT=90 arm_rounds "nvfp4 dsv3_prefill" 1 B '^(inference forward|BF16 layer) ' dist-moe bench \
    --shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 100
  arm_rounds "mega nvfp4 dsv3_decode" 1 B '^(inference forward|staged layer|BF16 layer) ' dist-moe bench $decode \
    --format nvfp4 --pipeline mega
  [ "$(left)" -gt 110 ] && quant_table 1
else
  OUT=$L scripts/quick_build.sh bench_quantize dist_moe_gpu_tests || exit 1
  echo "built at $((SECONDS-T0)) s"
  gtests quant 'Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*' 150
  quant_table 1
  quant_table 2
fi
