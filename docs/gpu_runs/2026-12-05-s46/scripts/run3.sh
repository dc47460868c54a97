#!/usr/bin/env bash
# s46 run 3, after run1 / run2 (s44's scripts) went green: (1) Mega without DMOE_EXPERIMENTAL_MEGA
# (the ungate commit) -- the torch Mega tests, the emulated-peer Mega cases and the NVFP4 suite's Mega
# cases with the variable unset; (2) perf_history G101, FP8 blockwise's swap-AB bound
# (kFp8SwapAbMaxRowsPerExpert = 16 token rows per expert; DMOE_FP8_SWAPAB_MAX_ROWS=64 is the old pick):
# the FP8 GEMM tests and the FP8 inference suite, every FP8 decode tile at 8 / 16 / 32 / 64 rows per
# expert (qwen3_30b dims at EP1, dsv3 dims at EP2 sizes), the FP8 inference layer with the bound at 16
# and 64 in alternating processes; (3) as time allows, the Mega ncu script (why Mega trails at T = 128).
RUN_NAME=s46r3; source scripts/device_run_prelude.sh
OUT=$L scripts/quick_build.sh all || exit 1
unset DMOE_EXPERIMENTAL_MEGA
PYTHONPATH=$PWD/python timeout 120 python3 -m pytest -q -x tests/torch/test_mega.py > $L/torch_mega.log 2>&1
echo "torch mega (ungated) rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_mega.log)"
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests \
  --gtest_filter='*EmulatedPeers*mega*:GroupedGemmFp8*:QuantizeFp8*' > $L/gemm_tests.log 2>&1
echo "emulated mega + fp8 GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gemm_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gemm_tests.log | head -10
for t in nvfp4_pipeline:mega fp8_blockwise_pipeline:; do
  s=${t%%:*} f=${t#*:}
  timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_${s}_tests ${f:+--filter $f} > $L/suite_$s.log 2>&1
  echo "$s ${f:-all} rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$s.log | head -3 | tr '\n' ' ')"
done
gemm() {  # name shape ep tokens
  local f=$L/gemm_$1.log
  [ "$(left)" -gt 60 ] || { echo "skip $1"; return; }
  timeout 150 build-gpu/bench/bench_grouped_gemm --shapes "$2" --ep "$3" --tokens "$4" --routing random \
    --ops w13_fprop_fp8,w2_fprop_fp8 --sweep --sweep-match _s --rounds 2 > $f 2>&1
  echo "gemm $1 rc=$? at $((SECONDS-T0)) s:"
  grep -E "^bs " $f | sed -E "s/ +/ /g" | cut -d' ' -f2-7,19-22
}
gemm qwen3_t128 qwen3_30b 1 128
gemm qwen3_t256 qwen3_30b 1 256
gemm dsv3_t256_ep2 dsv3_decode 2 256
gemm dsv3_t512_ep2 dsv3_decode 2 512
gemm dsv3_t1024_ep2 dsv3_decode 2 1024
layer() {  # name bound shape [tokens]
  local f=$L/layer_$1_b$2.log tok=()
  [ -n "${4:-}" ] && tok=(--tokens "$4")
  [ "$(left)" -gt 40 ] || { echo "skip $1 bound=$2"; return; }
  DMOE_FP8_SWAPAB_MAX_ROWS=$2 DMOE_PRINT_GEMM_CONFIG=1 timeout 100 build-gpu/dist-moe bench --shape "$3" "${tok[@]}" \
    --mode infer --format fp8_blockwise --no-baseline --iters 10 --sustain-ms 50 > $f 2>&1
  echo "$1 bound=$2 rc=$? at $((SECONDS-T0)) s: $(grep -E '^(inference forward|BF16 layer) ' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-5 | tr '\n' ';')"
  echo "   stages: $(grep -E '^fwd:' $f | grep -E 'w13|w2' | awk '{printf "%s %s; ", $1, $2}')"
  grep -E "grouped_gemm .*fp8.* -> " $f | sed 's/.*grouped_gemm //' | sort -u | head -3
  grep -iE "error|exception" $f | head -3
}
for r in 1 2; do
  for b in 16 64; do layer qwen3_t512 $b qwen3_30b 512; layer qwen3_t1024 $b qwen3_30b 1024; done
done
for b in 16 64; do layer qwen3_t256 $b qwen3_30b 256; layer dsv3_decode $b dsv3_decode; done
[ "$(left)" -gt 240 ] || exit 0  # four profiled processes and their imports (30 s each)
NCU_STEP_S=$(( ($(left) - 140) / 4 )) OUT=$L/ncu bash docs/gpu_runs/2026-12-05-s43/scripts/next_ncu_mega_unrun.sh 2>&1 | tail -40
