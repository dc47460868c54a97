#!/usr/bin/env bash
# s61 r8 (not run in s61: no device time left; G131 is not on main). Before running it, apply both
# patches to the tree:
#   git apply docs/gpu_runs/2026-12-06-s61/g131_stage_scales.patch
#   git apply docs/gpu_runs/2026-12-06-s61/g131b_early_token_scales.patch
# Three arms, alternated: A = main (both reversed), S = + the 16-token expanded NVFP4 decode kernels'
# weight scales copied into each stage by producer warps 1-3 (four 44 KiB stages), T = the tree: + the
# epilogue's NVFP4 factors (token_scale_inv, the expert's global scale) loaded before the tile's k
# loop. On T: the NVFP4 / Mega / expand / quantizer gtests, the whole GPU gtest suite if time allows
# at the end, and the NVFP4 layer suite against the CPU oracle; alternated: the decode GEMMs (W13, W2
# on expanded rows) at dsv3_decode EP1 and qwen3_30b T = 128, and the staged NVFP4 layer at both.
RUN_NAME=s61r8; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s61
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
arm_dir() { case $1 in A) echo .abtree/build-ab;; S) echo .abtree_s/build-s;; T) echo build-gpu;; esac; }
reversed_tree .abtree build-ab $L/A "dist-moe bench_grouped_gemm" $D/g131b_early_token_scales.patch \
  $D/g131_stage_scales.patch || exit 1
a=$REVERSED_TREE_PID
reversed_tree .abtree_s build-s $L/S "dist-moe bench_grouped_gemm" $D/g131b_early_token_scales.patch || exit 1
s=$REVERSED_TREE_PID
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm dist_moe_gpu_tests dmoe_launch dist_moe_nvfp4_pipeline_tests ||
  exit 1
wait $a || { tail -20 $L/A/build.log; exit 1; }
wait $s || { tail -20 $L/S/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' $L/suite_nvfp4.log | head -3 | tr '\n' ' ')"
for r in 1 2; do
  for arm in A S T; do
    for shape in dsv3_decode qwen3_30b; do
      [ "$(left)" -lt 150 ] && break 3
      extra="--iters 10"; [ $shape = qwen3_30b ] && extra="--tokens 128 --iters 20"
      f=$L/gemm_${shape}_$arm$r.log
      timeout 60 $(arm_dir $arm)/bench/bench_grouped_gemm --shapes $shape --ep 1 $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 > $f 2>&1
      echo "gemm $shape $arm$r: $(bs_picks $f)"
    done
  done
done
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
arm_rounds "staged dsv3_decode" 2 "A S T" '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench $decode
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50"
arm_rounds "staged qwen3 T128" 2 "A S T" '^(inference forward|BF16 layer) ' dist-moe bench $t128
t=$(( $(left) - 5 ))
[ $t -gt 150 ] && gtests all '*' $t
