#!/usr/bin/env bash
# s47 run 5: G104 (the Mega decode form's counts and hand-offs on the producer's idle warps) and
# G105 (the rows form's deferred counts, DMOE_MEGA_DEFERRED_ARRIVAL, at qwen3_30b T = 512 / 1024) --
# build; the Mega tests with the new default and the decode ones with DMOE_MEGA_CONSUMER_HANDOFF=1;
# the layer suites' and torch Mega cases; the A/B (Mega against staged in each process, the knob at 0
# and 1 in alternating processes) at qwen3_30b T = 128 and dsv3_decode, NVFP4 and MXFP8; then s46's
# unrun G102 A/B (Mega training's backward) with what time is left. RUN5_BUDGET_S: the device time
# this call may take (default 540), RUN5_ROUNDS: A/B rounds (default 2).
RUN_NAME=s47r5; source scripts/device_run_prelude.sh
left() { echo $((${RUN5_BUDGET_S:-540} - (SECONDS - T0))); }
OUT=$L scripts/quick_build.sh all || exit 1
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Mega*:*EmulatedPeers*mega*' \
  > $L/mega_tests.log 2>&1
echo "mega tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/mega_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|differ|Which is|exception" $L/mega_tests.log | head -12
DMOE_MEGA_CONSUMER_HANDOFF=1 DMOE_COMM_TIMEOUT_MS=10000 timeout 100 build-gpu/tests/dist_moe_gpu_tests \
  --gtest_filter='MegaNvfp4Decode*:MegaMxfp8Decode*:*EmulatedPeers*mega*' > $L/mega_tests_consumer_handoff.log 2>&1
echo "mega decode tests, consumer hand-off rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/mega_tests_consumer_handoff.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/mega_tests_consumer_handoff.log | head -6
DMOE_MEGA_DEFERRED_ARRIVAL=1 DMOE_COMM_TIMEOUT_MS=10000 timeout 100 build-gpu/tests/dist_moe_gpu_tests \
  --gtest_filter='MegaMxfp8Rows*:*EmulatedPeers*mega*' > $L/mega_tests_deferred.log 2>&1
echo "mega rows tests, deferred arrival rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/mega_tests_deferred.log | tr '\n' ' ')"
for t in mxfp8_pipeline nvfp4_pipeline; do
  timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_${t}_tests --filter mega \
    > $L/suite_mega_$t.log 2>&1
  echo "$t mega rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mega_$t.log | head -3 | tr '\n' ' ')"
done
PYTHONPATH=$PWD/python timeout 100 python3 -m pytest -q -x tests/torch/test_mega.py > $L/torch_mega.log 2>&1
echo "torch mega rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_mega.log)"
grep -E "^FAILED|Error" $L/torch_mega.log | head -6
bench() {  # name shape format tokens knob value round: Mega against staged in one process
  local f=$L/layer_$1_$5$6.$7.log tok=()
  [ -n "$4" ] && tok=(--tokens "$4")
  [ "$(left)" -gt 40 ] || { echo "skip $1 $5=$6"; return; }
  env $5=$6 timeout 60 build-gpu/dist-moe bench --shape "$2" "${tok[@]}" --mode infer --format "$3" \
    --no-baseline --iters 10 --sustain-ms 50 --pipeline mega > $f 2>&1
  echo "$1 $5=$6 r$7 rc=$? at $((SECONDS-T0)) s: $(grep -E '^fwd:mega ' $f | head -1 | awk '{printf "mega stage %s; ", $2}')$(grep -E '^(inference forward|staged layer inference|BF16 layer inference) ' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-5 | tr '\n' ';')"
}
H=DMOE_MEGA_CONSUMER_HANDOFF D=DMOE_MEGA_DEFERRED_ARRIVAL
round() {
  for k in 0 1; do
    bench qwen3_t128_nvfp4 qwen3_30b nvfp4 128 $H $k $1
    bench qwen3_t128_mxfp8 qwen3_30b mxfp8 128 $H $k $1
    bench dsv3_decode_nvfp4 dsv3_decode nvfp4 "" $H $k $1
    bench dsv3_decode_mxfp8 dsv3_decode mxfp8 "" $H $k $1
    bench qwen3_t512_mxfp8 qwen3_30b mxfp8 512 $D $k $1  # G105: the rows form
    bench qwen3_t1024_mxfp8 qwen3_30b mxfp8 1024 $D $k $1
  done
}
round 1
# s46's G102 A/B (Mega training's backward: the staged pair by default, the fused launch with the knob).
for k in 0 1; do
  [ "$(left)" -gt 45 ] || { echo "skip G102 fused=$k"; continue; }
  DMOE_MEGA_FUSED_DGRAD_SWIGLU=$k timeout 60 build-gpu/dist-moe bench --shape qwen3_30b --mode train --format mxfp8 \
    --no-baseline --iters 10 --sustain-ms 50 --pipeline mega > $L/layer_qwen3_train_fused$k.log 2>&1
  echo "qwen3 train mega fused=$k rc=$? at $((SECONDS-T0)) s: $(grep -E '^(forward\+backward|staged layer) ' \
    $L/layer_qwen3_train_fused$k.log | sed -E 's/ +/ /g' | cut -d' ' -f1-5 | tr '\n' ';')"
done
for r in $(seq 2 ${RUN5_ROUNDS:-2}); do round $r; done
# With time left, run 6's steps (its logs packed inside this run's).
[ "$(left)" -gt 130 ] && OUT=$L/r6 RUN6_BUDGET_S=$(( $(left) - 10 )) bash docs/gpu_runs/2026-12-05-s47/scripts/run6.sh
