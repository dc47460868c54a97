#!/usr/bin/env bash
# G119 A/B, part 1 (prepared in s52, which was lent no GPU): A = main, B = main with
# g119_uniform_descs.patch applied here first (the FP8-blockwise, MXFP8 and NVFP4 k loops build their
# wgmma descriptors from warp-uniform inputs). SASS counts of both trees' W13 FPROP 128x256 kernel
# (cuobjdump here: does it agree with scripts/sass_local.sh?); FP8 GEMM picks alternated A / B (3 rounds,
# qwen3_30b + mixtral EP2 sizes, balanced, each after 200 ms of its own load; dsv3_prefill in 2 more
# rounds if time is left); the qwen3_30b FP8-blockwise training layer alternated (2 rounds); B's
# FP8 GEMM tests and FP8-blockwise training suite.
RUN_NAME=g119a; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-05-s52
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
# B = this copy with the patch (the device's copy only); A = the same with it reversed (ab_trees.sh).
patch -s -p1 --forward < $D/g119_uniform_descs.patch || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $D/g119_uniform_descs.patch \
  "dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
for side in A B; do
  o=build-gpu/CMakeFiles/dist_moe_gemm.dir/src/gemm/grouped_gemm_sm90_w13.cu.o
  [ $side = A ] && o=.abtree/build-ab/CMakeFiles/dist_moe_gemm.dir/src/gemm/grouped_gemm_sm90_w13.cu.o
  cuobjdump -sass $o > $L/w13_$side.sass 2>&1
done
python3 scripts/sass_loops.py $L/w13_A.sass $L/w13_B.sass --kernel 'Fp8Blockwise.*Li128ELi256ELi4E.*WeightSplitE1ELi1E' | tee $L/sass_loops.txt
rm -f $L/w13_?.sass
OPS=w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8
gemm_ab() {  # rounds shapes
  scripts/gemm_ab_rounds.sh .abtree/build-ab/bench/bench_grouped_gemm build-gpu/bench/bench_grouped_gemm $1 \
    $L/gemm_rows_$2.txt --ep 2 --shapes $2 --routing balanced --ops $OPS --sweep-match NONE | tee $L/gemm_ab_$2.txt
  echo "gemm A/B ($2) done at $((SECONDS-T0)) s"
}
gemm_ab 3 qwen3_30b,mixtral
for r in 1 2; do
  for side in A B; do
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    timeout 90 $b/dist-moe bench --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_$side$r.log 2>&1
    echo "layer $side$r: $(grep -E '^forward\+backward' $L/layer_$side$r.log | awk '{print $2}') ms, BF16 $(grep -E '^BF16 layer forward\+backward' $L/layer_$side$r.log | awk '{print $4, $5}')"
  done
done
grep -hE "^fwd:w13|^fwd:w2 |^bwd:w2_dgrad|^bwd:w13_dgrad" $L/layer_A2.log $L/layer_B2.log
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*' > $L/tests_fp8.log 2>&1
echo "FP8 GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_fp8.log | tr '\n' ' ')"
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 180 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/suite_fp8bw_train.log 2>&1
echo "FP8-blockwise training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|ERROR' $L/suite_fp8bw_train.log | head -3 | tr '\n' ' ')"
[ "$(left)" -gt 140 ] && gemm_ab 2 dsv3_prefill
# If time is left: B's W13 FPROP source page by CUDA line, beside s51 r1's A page (G115: the slice
# waits held ~27% of the stall samples; does the wait-to-issue path shrink?).
[ "$(left)" -gt 70 ] || exit 0
K0='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, \(int\)128, \(int\)256'
timeout 100 ncu --clock-control none --kernel-name-base demangled -k "regex:$K0" --launch-skip 3 -c 1 \
  --section SourceCounters --section WarpStateStats -o $L/ncu_w13 \
  build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b --routing balanced --ops w13_fprop_fp8 --sweep-match NONE \
  --iters 4 --sustain-ms 0 > $L/ncu_w13_run.txt 2>&1
timeout 60 ncu --import $L/ncu_w13.ncu-rep --page source --csv --print-source cuda,sass > $L/ncu_w13_B.csv 2>&1
python3 scripts/ncu_by_line.py $L/ncu_w13_B.csv > $L/w13_fprop_fp8_B_by_line.txt 2>&1
echo "ncu rc=$? at $((SECONDS-T0)) s"; head -25 $L/w13_fprop_fp8_B_by_line.txt; rm -f $L/ncu_w13.ncu-rep $L/ncu_w13_B.csv
