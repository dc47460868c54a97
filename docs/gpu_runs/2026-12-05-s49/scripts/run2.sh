#!/usr/bin/env bash
# s49 run 2: after G109 (the rings on 128-byte lines), look for more of its kind. Build; the full
# quantizer table once (this tree); then each quantizer below 0.85x of the copy (and its aligned
# FP8-blockwise twin) alone under ncu's source counters at qwen3_30b sizes (bench_quantize --cases):
# L2 sectors and shared wavefronts against their ideal, the instructions with the most excess and
# the most stall samples (ncu_source_summary.py). RUN2_BUDGET_S: this call's device time.
RUN_NAME=s49r2; source scripts/device_run_prelude.sh
left() { echo $((${RUN2_BUDGET_S:-540} - (SECONDS - T0))); }
S=docs/gpu_runs/2026-12-05-s49/scripts
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize dist_moe_gpu_tests || exit 1
echo "built at $((SECONDS-T0)) s"
timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*' > $L/tests_quant.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_quant.log | tr '\n' ' ')"
timeout 100 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize.log 2>&1
echo "bench_quantize rc=$? at $((SECONDS-T0)) s"; sed -n '/^summary/,$p' $L/quantize.log | grep -E 'below|quantizers at|fused x'
grep -A3 'layer quantize_x' $L/quantize.log
# case name : kernel regex (demangled) : launches to skip (setup launches of the same kernel + 1)
for spec in "nvfp4_token_rows:nvfp4_rows_kernel:3" "nvfp4_expand_rows:expand_nvfp4_rows_kernel:2" \
            "mxfp8_rows_cols_g:quantize_rows_cols_kernel<.*Mxfp8:3" "fp8bw_rows_cols:quantize_rows_cols_kernel<.*Fp8Blockwise:2" \
            "mxfp8_dequant_cols:mxfp8_dequantize_columns_kernel:2" "nvfp4_w:nvfp4_weight_pipelined_kernel:2" \
            "mxfp8_w_train_t:mxfp8_weight_tiles_kernel<true:2" "fp8bw_fused:swiglu_backward_quantize_kernel<.*Fp8Blockwise:2" \
            "mxfp8_fused:swiglu_backward_quantize_kernel<.*Mxfp8:2"; do
  [ "$(left)" -gt 25 ] || break
  IFS=: read -r case kre skip <<< "$spec"
  timeout 40 ncu --kernel-name-base demangled -k "regex:$kre" -s $skip -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SourceCounters -o $L/ncu_$case build-gpu/bench/bench_quantize --shapes qwen3_30b --iters 5 --sustain-ms 0 \
    --cases $case > $L/ncu_$case.txt 2>&1
  rc=$?
  timeout 20 ncu --import $L/ncu_$case.ncu-rep --page source --csv --print-source sass > $L/source_$case.csv 2>/dev/null
  timeout 20 ncu --import $L/ncu_$case.ncu-rep --page details > $L/details_$case.txt 2>/dev/null
  echo "== $case (rc=$rc at $((SECONDS-T0)) s): $(grep -E '^\s+(Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued Instruction|Achieved Occupancy)' $L/details_$case.txt | tr -s ' ' | tr '\n' ';')"
  python3 $S/ncu_source_summary.py $L/source_$case.csv | tail -n +2
done
