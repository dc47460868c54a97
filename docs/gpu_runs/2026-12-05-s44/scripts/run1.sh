#!/usr/bin/env bash
# s44 run 1 (s43's unrun run3 plus the MXFP8 GEMM tests, which now include the narrow-tile split of G99 and its
# "_nosplit" twins), after s43's fixes (swap-AB token scales read after the first full stage in
# the Mega launch; the rows form's D/F multiple; the k-block-word scale grid check; the training
# test's capacity): build; the Mega and DgradSwigluMxfp8 GEMM tests; the layer suites' Mega cases;
# the torch Mega tests; Mega vs staged MXFP8 training at qwen3_30b (stage table); Mega and staged
# inference with stage tables and GEMM configurations; every other GPU test. One device call: stops
# starting steps past ~540 s. Session 45 added the emulated-peer Mega cases (EP 2 / 4, bitwise against
# staged) to the first test step and G100's hand-off (its Mega/staged ratios in the inference benches).
RUN_NAME=s44r1; source scripts/device_run_prelude.sh
OUT=$L scripts/quick_build.sh all || exit 1  # (build-gpu, its log in $L/build.log)
DMOE_COMM_TIMEOUT_MS=10000 timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Mega*:DgradSwigluMxfp8*:GroupedGemmMxfp8*:*EmulatedPeers*mega*' \
  > $L/mega_mxfp8_gemm_tests.log 2>&1
echo "mega + mxfp8 GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/mega_mxfp8_gemm_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|differ|Which is|exception" $L/mega_mxfp8_gemm_tests.log | head -20
for t in mxfp8_pipeline nvfp4_pipeline; do
  DMOE_EXPERIMENTAL_MEGA=1 timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_${t}_tests \
    --filter mega > $L/suite_mega_$t.log 2>&1
  echo "$t mega rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mega_$t.log | head -3 | tr '\n' ' ')"
done
PYTHONPATH=$PWD/python DMOE_EXPERIMENTAL_MEGA=1 timeout 120 python3 -m pytest -q -x tests/torch/test_mega.py > $L/torch_mega.log 2>&1
echo "torch mega rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_mega.log)"
grep -E "^FAILED|Error" $L/torch_mega.log | head -8
DMOE_EXPERIMENTAL_MEGA=1 timeout 120 build-gpu/dist-moe bench --shape qwen3_30b --mode train --format mxfp8 --no-baseline \
  --iters 10 --sustain-ms 50 --pipeline mega > $L/layer_qwen3_train.log 2>&1
echo "qwen3 train mega rc=$? at $((SECONDS-T0)) s:"
grep -E "^(forward|backward|forward\+backward|staged layer|BF16 layer)|mega|w2_dgrad|swiglu_backward|error" $L/layer_qwen3_train.log | head -16
export DMOE_EXPERIMENTAL_MEGA=1  # (until the gate goes)
bench() {  # name pipeline shape format [tokens]
  local f=$L/layer_$1_$2.log tok=()
  [ -n "${5:-}" ] && tok=(--tokens "$5")
  [ "$(left)" -gt 40 ] || { echo "skip $1 $2"; return; }
  DMOE_PRINT_GEMM_CONFIG=1 timeout 90 build-gpu/dist-moe bench --shape "$3" "${tok[@]}" --mode infer --format "$4" --no-baseline --iters 10 \
    --sustain-ms 50 --pipeline $2 > $f 2>&1
  echo "$1 $2 rc=$? at $((SECONDS-T0)) s: $(grep -E '^fwd:' $f | awk '{printf "%s %s; ", $1, $2}')"
  grep -E "^(inference forward|BF16 layer|staged layer)|teardown|error" $f | head -4
  grep -E "grouped_gemm .* -> " $f | sed 's/.*grouped_gemm //' | sort -u | head -4
}
for p in mega staged; do
  bench qwen3_t128_mxfp8 $p qwen3_30b mxfp8 128
  bench qwen3_t512_mxfp8 $p qwen3_30b mxfp8 512
  bench qwen3_t1024_mxfp8 $p qwen3_30b mxfp8 1024
  bench qwen3_t128_nvfp4 $p qwen3_30b nvfp4 128
  bench dsv3_decode_mxfp8 $p dsv3_decode mxfp8
  bench dsv3_decode_nvfp4 $p dsv3_decode nvfp4
done
[ "$(left)" -gt 100 ] || exit 0
DMOE_COMM_TIMEOUT_MS=10000 timeout $(( $(left) - 20 )) build-gpu/tests/dist_moe_gpu_tests --gtest_filter='-Mega*:DgradSwigluMxfp8*:GroupedGemmMxfp8*:*EmulatedPeers*mega*' \
  > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gpu_tests.log | head -10
