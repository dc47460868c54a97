#!/usr/bin/env bash
# s48 run 4 (measurement): the fused SwiGLU backward + dxy quantizers at every region shape (MXFP8's
# sweep is new; FP8 blockwise's existed), with the quantizer table, at qwen3_30b and dsv3_prefill:
# does a region shape other than choose_fused_region's pick move MXFP8's 0.66-0.67x of the copy rate?
RUN_NAME=s48r4; source scripts/device_run_prelude.sh
OUT=$L scripts/quick_build.sh bench_quantize || exit 1
echo "built at $((SECONDS-T0)) s"
timeout 300 build-gpu/bench/bench_quantize --shapes qwen3_30b,dsv3_prefill --regions --iters 20 --sustain-ms 100 > $L/quantize_regions.log 2>&1
echo "bench_quantize --regions rc=$? at $((SECONDS-T0)) s"
awk '/fused by region/{p=1} /^$/{p=0} p' $L/quantize_regions.log | head -60
grep -E "dxy \(|mxfp8_fused |fp8bw_fused " $L/quantize_regions.log | head -12
