#!/usr/bin/env bash
# s75 r4 (G155's why): the rows + columns quantizer on the layer's own gather (bench_quantize's new _gk rows: T
# token rows, each read by ~K routes; "moved" counts each row once, so "x copy" is against the kernel's floor) next
# to the contiguous and M-distinct-row forms, qwen3_30b and dsv3_prefill; then ncu of the three FP8-blockwise forms
# at qwen3_30b: DRAM bytes read (the 33.5 MB source once, or the 268 MB of routed rows), L2 hit rate, issue, stalls.
RUN_NAME=r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize || exit 1
echo "built at $((SECONDS-T0)) s"
cases=fp8bw_rows_cols,fp8bw_rows_cols_gc,fp8bw_rows_cols_gk,mxfp8s_rows_cols_gc,mxfp8s_rows_cols_gk
timeout 60 build-gpu/bench/bench_quantize --shapes qwen3_30b,dsv3_prefill --cases $cases > $L/quant.log 2>&1
echo "bench_quantize rc=$? at $((SECONDS-T0)) s"
grep -E "_rows_cols|^quantizer|activations|quantize_x" $L/quant.log | grep -v "^summary" | head -24
for c in fp8bw_rows_cols fp8bw_rows_cols_gc fp8bw_rows_cols_gk; do
  [ "$(left)" -gt 45 ] || break
  timeout 60 ncu --clock-control none --kernel-name-base demangled -k "regex:quantize_rows_cols_kernel" --launch-skip 1 -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum \
    build-gpu/bench/bench_quantize --shapes qwen3_30b --cases $c --iters 1 --sustain-ms 0 > $L/ncu_$c.txt 2>&1
  echo "ncu $c rc=$? at $((SECONDS-T0)) s: $(grep -E "^ +(Duration|DRAM Throughput|L2 Hit Rate|Issue Slots Busy|No Eligible|dram__bytes_read.sum|dram__bytes_write.sum|lts__t_sectors_srcunit_tex_op_read.sum|lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum) " $L/ncu_$c.txt | sed -E 's/ +/ /g' | tr '\n' ';')"
done
