#!/usr/bin/env bash
# s75 r4: why G155 moved nothing -- ncu of main's gathered rows + columns quantizers inside the FP8-blockwise
# qwen3_30b EP1 training layer (quantize_x, then the backward's ones): DRAM bytes read against the 33.5 MB source
# (source reused in the L2) or the 268 MB of routed rows (not reused), L2 hit rate, issue and stall figures.
RUN_NAME=r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe || exit 1
echo "built at $((SECONDS-T0)) s"
timeout 150 ncu --clock-control none --target-processes all --kernel-name-base demangled \
  -k "regex:quantize_rows_cols_kernel" -c 3 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section LaunchStats \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_op_write.sum \
  -o $L/gq build-gpu/dist-moe bench --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 1 --sustain-ms 0 \
  > $L/gq_run.txt 2>&1
echo "ncu rc=$? at $((SECONDS-T0)) s"
timeout 60 ncu --import $L/gq.ncu-rep --page details > $L/gq_details.txt 2>&1
grep -E "quantize_rows_cols_kernel|Duration|DRAM Throughput|dram__bytes|lts__t_sectors|L2 Hit Rate|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Achieved Occupancy|Grid Size|Registers" \
  $L/gq_details.txt | sed -E 's/ +/ /g; s/\(dist_moe::quant::Bf16Matrix.*//' | head -60
rm -f $L/gq.ncu-rep
