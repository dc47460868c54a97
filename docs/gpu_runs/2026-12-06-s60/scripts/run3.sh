#!/usr/bin/env bash
# s60 r3: G126 kept (HEAD) against main before it (A: ../g126_code.patch reversed, the new header
# left unused). On any card: the NVFP4 layer suite against the CPU oracle, test_mega.py (Mega against staged, NVFP4 and MXFP8) and the whole GPU
# gtest suite on HEAD. On an H200 (where the NVFP4 decode GEMMs are issue-bound): A / B alternated --
# the dsv3_decode NVFP4 layer staged and Mega against our BF16 layer, the decode GEMMs at dsv3_decode
# EP1 -- then issue #24's quantizer table on B. On an H100: the same layers at qwen3_30b T = 128.
RUN_NAME=s60r3; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s60
OUT=$L scripts/ab_trees.sh $PWD/$D/g126_code.patch \
  "dist-moe bench_grouped_gemm bench_quantize dist_moe_gpu_tests dist_moe_torch dist_moe_native dmoe_launch dist_moe_nvfp4_pipeline_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built A/B at $((SECONDS-T0)) s"
timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_nvfp4.log | head -3 | tr '\n' ' ')"
BUDGET=200 torch_tests test_mega 2> /dev/null | grep -v torch_rest
if [[ $gpu == *H200* ]]; then
  decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
  ab_layer_rounds "nvfp4 staged" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
  ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --pipeline mega
  for r in 1 2; do
    for side in A B; do
      [ "$(left)" -lt 150 ] && break 2
      b=build-gpu; [ $side = A ] && b=.abtree/build-ab
      f=$L/gemm_$side$r.log
      timeout 60 $b/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
      echo "gemm $side$r: $(bs_picks $f)"
    done
  done
  if [ "$(left)" -gt 110 ]; then
    timeout $(( $(left) - 10 )) build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 \
      --sustain-ms 100 > $L/quantize.log 2>&1
    echo "quantize rc=$?: $(grep 'of 32' $L/quantize.log)"; grep below $L/quantize.log
  fi
else
  t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50"
  ab_layer_rounds "nvfp4 t128 staged" 2 '^(inference forward|BF16 layer) ' $t128
  ab_layer_rounds "nvfp4 t128 mega" 2 '^(inference forward|staged layer|BF16 layer) ' $t128 --pipeline mega
fi
if [ "$(left)" -gt 100 ]; then
  timeout $(( $(left) - 15 )) build-gpu/tests/dist_moe_gpu_tests --gtest_color=no --gtest_brief=1 > $L/gtest_all.log 2>&1
  echo "all gtests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gtest_all.log | tr '\n' ' ')"
  grep -E '^\[  FAILED' $L/gtest_all.log | head -8
fi
