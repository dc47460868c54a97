#!/usr/bin/env bash
# s62 r1: s61's unrun r8 (G131, G131b) plus G132, on one card. The tree is main with three patches
# applied (git apply, in this order): ../../2026-12-06-s61/g131_stage_scales.patch,
# ../../2026-12-06-s61/g131b_early_token_scales.patch, ../g132_two_ctas.patch.
# Arms, alternated: A = main (all three reversed); S = + G131 (the 16-token expanded NVFP4 decode
# kernels' weight scales copied into each stage by producer warps 1-3, four 44 KiB stages);
# T = the tree: + G131b (the epilogue's NVFP4 factors loaded before the k loop) + G132 compiled but
# not picked; X = T's binaries with DMOE_GEMM_EXPERIMENTAL=1, which picks G132's kernel (the same
# 16-token tile two CTAs per SM, two stages each, 104 consumer registers, one A register set). The
# GEMM benchmark sweeps every compiled config, so T's GEMM logs also time G132's kernel
# (256x16x256_s2_swapab_2cta) next to G131's (256x16x256_s4_swapab) in one process.
# On T: the NVFP4 / Mega / expand / quantizer gtests (their parameterized GEMM tests cover every
# compiled config, G132's included), the NVFP4 layer suite against the CPU oracle (T, then X at the
# end), the whole GPU gtest suite if time is left.
RUN_NAME=s62r1; source scripts/device_run_prelude.sh
D1=docs/gpu_runs/2026-12-06-s61
D=docs/gpu_runs/2026-12-06-s62
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
# Arm X: T's binaries under DMOE_GEMM_EXPERIMENTAL=1, through wrappers in .xarm (arm_rounds runs
# $(arm_dir ARM)/PROGRAM).
mkdir -p .xarm/bench .xarm/tests
for p in dist-moe bench/bench_grouped_gemm tests/dist_moe_nvfp4_pipeline_tests; do
  printf '#!/bin/sh\nDMOE_GEMM_EXPERIMENTAL=1 exec %s/build-gpu/%s "$@"\n' "$PWD" "$p" > .xarm/$p
  chmod +x .xarm/$p
done
arm_dir() { case $1 in A) echo .abtree/build-ab;; S) echo .abtree_s/build-s;; T) echo build-gpu;; X) echo .xarm;; esac; }
reversed_tree .abtree build-ab $L/A "dist-moe bench_grouped_gemm" $D/g132_two_ctas.patch \
  $D1/g131b_early_token_scales.patch $D1/g131_stage_scales.patch || exit 1
a=$REVERSED_TREE_PID
reversed_tree .abtree_s build-s $L/S "dist-moe bench_grouped_gemm" $D/g132_two_ctas.patch \
  $D1/g131b_early_token_scales.patch || exit 1
s=$REVERSED_TREE_PID
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm dist_moe_gpu_tests dmoe_launch dist_moe_nvfp4_pipeline_tests ||
  exit 1
wait $a || { tail -20 $L/A/build.log; exit 1; }
wait $s || { tail -20 $L/S/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
suite() {  # suite ARM: the NVFP4 layer suite against the CPU oracle
  timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- $(arm_dir $1)/tests/dist_moe_nvfp4_pipeline_tests \
    > $L/suite_nvfp4_$1.log 2>&1
  echo "nvfp4 suite $1 rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' \
    $L/suite_nvfp4_$1.log | head -3 | tr '\n' ' ')"
}
suite T
for r in 1 2; do
  for arm in A S T; do
    for shape in dsv3_decode qwen3_30b; do
      [ "$(left)" -lt 200 ] && break 3
      extra="--iters 10"; [ $shape = qwen3_30b ] && extra="--tokens 128 --iters 20"
      f=$L/gemm_${shape}_$arm$r.log
      sweep=""; [ $arm = T ] && sweep="--sweep --sweep-match 256x16x256"  # + G132's kernel
      timeout 60 $(arm_dir $arm)/bench/bench_grouped_gemm --shapes $shape --ep 1 $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 $sweep > $f 2>&1
      echo "gemm $shape $arm$r: $(bs_picks $f)"
      if [ $arm = T ]; then
        grep '_2cta' $f | awk '{c = ""; for (i = 1; i <= NF; i++) if ($i == "copy") c = $(i + 1);
                                printf "   %s %s %s ms, x copy %s\n", $4, $5, $6, c}'
      fi
    done
  done
done
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
arm_rounds "staged dsv3_decode" 2 "A S T X" '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench $decode
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50"
arm_rounds "staged qwen3 T128" 2 "A S T X" '^(inference forward|BF16 layer) ' dist-moe bench $t128
[ "$(left)" -gt 100 ] && suite X
t=$(( $(left) - 5 ))
[ $t -gt 150 ] && gtests all '*' $t
