#!/usr/bin/env bash
# s51 r3 (this tree = main: G115 dropped): issue #28's Mega pipeline, not measured since s47. Its GPU
# tests (gtest Mega*, the MXFP8 / NVFP4 layer suites' mega cases, torch test_mega.py) and Mega against
# the staged layer in one process (`dist-moe bench --pipeline mega`), two rounds: NVFP4 / MXFP8 at
# dsv3_decode and qwen3_30b T = 128, MXFP8's rows form at T = 512 / 1024, MXFP8 training at qwen3_30b.
RUN_NAME=s51r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests \
  dist_moe_nvfp4_pipeline_tests dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Mega*:*EmulatedPeers*mega*' \
  > $L/mega_tests.log 2>&1
echo "mega gtests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/mega_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/mega_tests.log | head -6
for t in mxfp8_pipeline nvfp4_pipeline; do
  timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_${t}_tests --filter mega \
    > $L/suite_mega_$t.log 2>&1
  echo "$t mega rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mega_$t.log | head -3 | tr '\n' ' ')"
done
PYTHONPATH=$PWD/python timeout 100 python3 -m pytest -q -x tests/torch/test_mega.py > $L/torch_mega.log 2>&1
echo "torch mega rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_mega.log)"
bench() {  # name shape format tokens mode round: Mega against staged in one process
  local f=$L/layer_$1.$6.log tok=()
  [ -n "$4" ] && tok=(--tokens "$4")
  [ "$(left)" -gt 40 ] || { echo "skip $1 r$6"; return; }
  timeout 60 build-gpu/dist-moe bench --shape "$2" "${tok[@]}" --mode "$5" --format "$3" \
    --no-baseline --iters 10 --sustain-ms 50 --pipeline mega > $f 2>&1
  echo "$1 r$6 rc=$? at $((SECONDS-T0)) s: $(grep -E '^(inference forward|forward\+backward|staged layer|BF16 layer) ' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-6 | tr '\n' ';')"
}
for r in 1 2; do
  bench dsv3_decode_nvfp4 dsv3_decode nvfp4 "" infer $r
  bench dsv3_decode_mxfp8 dsv3_decode mxfp8 "" infer $r
  bench qwen3_t128_nvfp4 qwen3_30b nvfp4 128 infer $r
  bench qwen3_t128_mxfp8 qwen3_30b mxfp8 128 infer $r
  bench qwen3_t512_mxfp8 qwen3_30b mxfp8 512 infer $r
  bench qwen3_t1024_mxfp8 qwen3_30b mxfp8 1024 infer $r
  bench qwen3_train_mxfp8 qwen3_30b mxfp8 "" train $r
done
