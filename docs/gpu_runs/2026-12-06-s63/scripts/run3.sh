#!/usr/bin/env bash
# s63 r3 (not run in session 63; for the next H200): G135 = G132's two-CTA NVFP4 decode tile re-based
# over G133 + G134. Run it with ../g135_two_ctas_over_g134.patch applied to the working tree (git apply):
# the patch compiles the `256x16x256_s2_swapab_2cta` entries, picked only under DMOE_GEMM_EXPERIMENTAL=1.
# Arms in one tree: T = the tree's binaries (the picks of main), X = the same binaries with
# DMOE_GEMM_EXPERIMENTAL=1 (the two-CTA tile picked). On T: the NVFP4 / Mega / expand / quantizer
# gtests (the parameterized GEMM tests cover every compiled config, the two-CTA tile's included), the
# NVFP4 layer suite on T and X. The GEMM benchmark's sweep times the two-CTA kernel next to the
# one-CTA pick in the same process; the staged layer at dsv3_decode and qwen3_30b T = 128, T and X
# alternated. On an H100 the result is known (G132: slower); the question is the H200.
RUN_NAME=s63r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
env_arm .xarm DMOE_GEMM_EXPERIMENTAL=1 dist-moe bench/bench_grouped_gemm tests/dist_moe_nvfp4_pipeline_tests
arm_dir() { case $1 in T) echo build-gpu;; X) echo .xarm;; esac; }
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm dist_moe_gpu_tests dmoe_launch dist_moe_nvfp4_pipeline_tests ||
  exit 1
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
nvfp4_suite X
for r in 1 2; do
  for shape in dsv3_decode qwen3_30b; do
    [ "$(left)" -lt 200 ] && break 2
    extra="--iters 10"; [ $shape = qwen3_30b ] && extra="--tokens 128 --iters 20"
    f=$L/gemm_${shape}_T$r.log
    timeout 60 build-gpu/bench/bench_grouped_gemm --shapes $shape --ep 1 $extra --routing balanced \
      --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 --sweep --sweep-match 256x16x256 > $f 2>&1
    echo "gemm $shape T$r: $(bs_picks $f)"
    grep '_2cta' $f | awk '{c = ""; for (i = 1; i <= NF; i++) if ($i == "copy") c = $(i + 1);
                            printf "   %s %s %s ms, x copy %s\n", $4, $5, $6, c}'
  done
done
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
arm_rounds "staged dsv3_decode" 2 "T X" '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench $decode
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50"
arm_rounds "staged qwen3 T128" 2 "T X" '^(inference forward|BF16 layer) ' dist-moe bench $t128
[ "$(left)" -gt 100 ] && nvfp4_suite T
