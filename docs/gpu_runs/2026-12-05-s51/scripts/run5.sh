#!/usr/bin/env bash
# s51 r5 (data for the next quantizer step, s50's note: "the ncu source view by CUDA line"): the
# fused SwiGLU-backward + dxy kernels (both formats) and the layer's quantize_x form (gathered rows,
# compact columns; both formats) at qwen3_30b, one launch each under ncu (SourceCounters +
# WarpStateStats), their source pages with CUDA lines condensed by scripts/ncu_by_line.py; the pages
# themselves gzipped.
RUN_NAME=s51r5; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize || exit 1
echo "built at $((SECONDS-T0)) s"
for spec in "mxfp8_fused:swiglu_backward_quantize_kernel<.*Mxfp8" "fp8bw_fused:swiglu_backward_quantize_kernel<.*Fp8Blockwise" \
            "mxfp8_rows_cols_gc:quantize_rows_cols_kernel<.*Mxfp8" "fp8bw_rows_cols_gc:quantize_rows_cols_kernel<.*Fp8Blockwise"; do
  IFS=: read -r case kre <<< "$spec"
  [ "$(left)" -gt 60 ] || { echo "skip $case"; continue; }
  timeout 90 ncu --kernel-name-base demangled -k "regex:$kre" -s 2 -c 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight -o $L/$case build-gpu/bench/bench_quantize --shapes qwen3_30b --iters 5 --sustain-ms 0 \
    --cases $case > $L/ncu_${case}_run.txt 2>&1
  timeout 60 ncu --import $L/$case.ncu-rep --page details > $L/ncu_${case}_details.txt 2>&1
  timeout 60 ncu --import $L/$case.ncu-rep --page source --csv --print-source cuda,sass > $L/ncu_${case}_page.csv 2>&1
  python3 scripts/ncu_by_line.py $L/ncu_${case}_page.csv 40 > $L/ncu_${case}_by_line.txt 2>&1
  echo "$case at $((SECONDS-T0)) s: $(grep -E 'Duration|Issue Slots Busy' $L/ncu_${case}_details.txt | tr -s ' ' | tr '\n' ' ')"
  head -4 $L/ncu_${case}_by_line.txt | cut -c1-160
  gzip $L/ncu_${case}_page.csv; rm -f $L/$case.ncu-rep
done
