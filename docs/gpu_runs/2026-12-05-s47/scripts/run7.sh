#!/usr/bin/env bash
# s47 run 7: G106 (FP8 blockwise's W2 on the 128x256 tile at decode sizes) -- build; the FP8-blockwise
# layer suite; the inference layer at dsv3_decode and qwen3_30b T = 128 / 256 with DMOE_FP8_W2_SWAPAB
# 0 / 1 in alternating processes (two rounds). RUN7_BUDGET_S: this call's device time (default 380).
RUN_NAME=s47r7; source scripts/device_run_prelude.sh
left() { echo $((${RUN7_BUDGET_S:-380} - (SECONDS - T0))); }
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_fp8_blockwise_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
bench() {  # name shape tokens knob round
  local f=$L/layer_$1_w2swapab$4.$5.log tok=()
  [ -n "$3" ] && tok=(--tokens "$3")
  [ "$(left)" -gt 25 ] || { echo "skip $1 $4"; return; }
  DMOE_FP8_W2_SWAPAB=$4 DMOE_PRINT_GEMM_CONFIG=1 timeout 40 build-gpu/dist-moe bench --shape "$2" "${tok[@]}" --mode infer \
    --format fp8_blockwise --no-baseline --iters 10 --sustain-ms 50 > $f 2>&1
  echo "$1 w2_swapab=$4 r$5 rc=$? at $((SECONDS-T0)) s: $(grep -E '^fwd:(w13|w2) ' $f | head -2 | awk '{printf "%s %s; ", $1, $2}')$(grep -E '^(inference forward|BF16 layer inference) ' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-5 | tr '\n' ';')"
  grep -E "fprop m_capacity.*fp8" $f | sed 's/.*-> //' | sort -u | head -2 | tr '\n' ' '; echo
}
for r in 1 2; do
  for k in 0 1; do
    bench dsv3_decode dsv3_decode "" $k $r
    bench qwen3_t128 qwen3_30b 128 $k $r
    bench qwen3_t256 qwen3_30b 256 $k $r
  done
  [ $r = 1 ] || continue
  timeout $(( $(left) > 130 ? 120 : 10 )) build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_fp8_blockwise_pipeline_tests \
    > $L/suite_fp8_blockwise.log 2>&1
  echo "fp8_blockwise suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_fp8_blockwise.log | head -3 | tr '\n' ' ')"
done
