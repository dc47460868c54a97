#!/usr/bin/env bash
# s61 r8: G131 A/B -- the 16-token expanded NVFP4 decode kernels with each stage's weight scales copied
# into the stage by producer warps 1-3 (four 44 KiB stages instead of five 40 KiB ones). A = this tree
# without ../g131_stage_scales.patch, B = this tree. On B: the NVFP4 / Mega / expand / quantizer
# gtests and the NVFP4 layer suite against the CPU oracle; then alternated: the decode GEMMs (W13, W2
# on expanded rows) at dsv3_decode EP1 and qwen3_30b T = 128, and the staged NVFP4 layer at both.
# Not run in s61 (no device time left): G131 is not on main. To run it, apply the patch to the tree
# first (`git apply docs/gpu_runs/2026-12-06-s61/g131_stage_scales.patch`; B = the tree with it) and
# drop the left() override below, which was cut to the ~270 s s61 had left.
RUN_NAME=s61r8; source scripts/device_run_prelude.sh
left() { echo $((250 - (SECONDS - T0))); }  # the session's device time left: ~270 s
D=docs/gpu_runs/2026-12-06-s61
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/ab_trees.sh $PWD/$D/g131_stage_scales.patch \
  "dist-moe bench_grouped_gemm dist_moe_gpu_tests dmoe_launch dist_moe_nvfp4_pipeline_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
for r in 1 2; do
  for side in A B; do
    for shape in dsv3_decode qwen3_30b; do
      [ "$(left)" -lt 80 ] && break 3
      extra="--iters 10"; [ $shape = qwen3_30b ] && extra="--tokens 128 --iters 20"
      f=$L/gemm_${shape}_$side$r.log
      timeout 60 $(arm_dir $side)/bench/bench_grouped_gemm --shapes $shape --ep 1 $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 > $f 2>&1
      echo "gemm $shape $side$r: $(bs_picks $f)"
    done
  done
done
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
ab_layer_rounds "staged dsv3_decode" 1 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50"
ab_layer_rounds "staged qwen3 T128" 1 '^(inference forward|BF16 layer) ' $t128
t=$(( $(left) - 5 ))
if [ $t -gt 40 ]; then
  timeout $t build-gpu/dmoe_launch -n 1 --timeout $((t - 5)) -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
  echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' $L/suite_nvfp4.log | head -3 | tr '\n' ' ')"
  grep -c "PASS case" $L/suite_nvfp4.log | sed 's/^/suite cases passed: /'
fi
