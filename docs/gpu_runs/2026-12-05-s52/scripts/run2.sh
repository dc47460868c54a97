#!/usr/bin/env bash
# G119 A/B, part 2 (prepared in s52): the same patch's NVFP4 and MXFP8 loops. A = main, B = main with
# g119_uniform_descs.patch (applied here first). Alternated A / B in one process each: NVFP4 decode at
# dsv3_decode, staged and Mega (`--pipeline mega` prints both); MXFP8 inference at dsv3_decode and
# qwen3_30b T = 512; the MXFP8 GEMM picks (qwen3_30b + mixtral EP2, balanced, 3 rounds); then B's tests:
# GroupedGemm{Mxfp8,Nvfp4}* and Mega gtests, the NVFP4 / MXFP8 pipeline suites.
RUN_NAME=g119b; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-05-s52
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
patch -s -p1 --forward < $D/g119_uniform_descs.patch || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $D/g119_uniform_descs.patch \
  "dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests dist_moe_nvfp4_pipeline_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
layer() {  # name shape format tokens round
  local tok=() side b f
  [ -n "$4" ] && tok=(--tokens "$4")
  for side in A B; do
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    f=$L/layer_$1_$side$5.log
    timeout 60 $b/dist-moe bench --shape "$2" "${tok[@]}" --mode infer --format "$3" --no-baseline --iters 10 \
      --sustain-ms 50 --pipeline mega > $f 2>&1
    echo "$1 $side$5: $(grep -E '^(inference forward|staged layer|BF16 layer) ' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-6 | tr '\n' ';')"
  done
}
for r in 1 2; do
  layer dsv3_decode_nvfp4 dsv3_decode nvfp4 "" $r
  layer dsv3_decode_mxfp8 dsv3_decode mxfp8 "" $r
  layer qwen3_t512_mxfp8 qwen3_30b mxfp8 512 $r
done
scripts/gemm_ab_rounds.sh .abtree/build-ab/bench/bench_grouped_gemm build-gpu/bench/bench_grouped_gemm 3 $L/gemm_rows.txt \
  --ep 2 --shapes qwen3_30b,mixtral --routing balanced --sweep-match NONE \
  --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 | tee $L/gemm_ab.txt
echo "gemm A/B done at $((SECONDS-T0)) s"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmMxfp8*:GroupedGemmNvfp4*:Mega*:DgradSwigluMxfp8*:Mxfp8Chain*' > $L/tests.log 2>&1
echo "GEMM + Mega tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests.log | tr '\n' ' ')"
for t in nvfp4_pipeline mxfp8_pipeline; do
  [ "$(left)" -gt 60 ] || { echo "skip suite $t"; continue; }
  timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_${t}_tests > $L/suite_$t.log 2>&1
  echo "suite $t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$t.log | head -3 | tr '\n' ' ')"
done
