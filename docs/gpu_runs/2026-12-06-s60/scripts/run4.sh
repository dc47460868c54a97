#!/usr/bin/env bash
# s60 r4: what r3 did not finish on HEAD: the NVFP4 layer suite against the CPU oracle in full (r3
# gave it 100 s and its last three cases did not start), test_mega.py (Mega against staged, NVFP4 and
# MXFP8) and test_nvfp4.py. On an H200 also G126's A / B at dsv3_decode (the layers staged and Mega
# against our BF16 layer), A = ../g126_code.patch reversed.
RUN_NAME=s60r4; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s60
targets="dist-moe dist_moe_torch dist_moe_native dmoe_launch dist_moe_nvfp4_pipeline_tests"
if [[ $gpu == *H200* ]]; then
  OUT=$L scripts/ab_trees.sh $PWD/$D/g126_code.patch "$targets" dist-moe || { tail -20 $L/build.log $L/A/build.log; exit 1; }
else
  OUT=$L scripts/quick_build.sh $targets || exit 1
fi
echo "built at $((SECONDS-T0)) s"
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' $L/suite_nvfp4.log | head -3 | tr '\n' ' ')"
grep -c "PASS case" $L/suite_nvfp4.log | sed 's/^/cases passed: /'
BUDGET=420 torch_tests test_mega test_nvfp4 2> /dev/null | grep -v torch_rest
if [[ $gpu == *H200* ]]; then
  decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
  ab_layer_rounds "nvfp4 staged" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
  ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --pipeline mega
fi
