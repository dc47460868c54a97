#!/usr/bin/env bash
# G155's why, for the next session (written in s75, not run there): the rows + columns quantizer on the layer's own
# gather (bench_quantize's _gk rows: T token rows, each read by ~K routes; "moved" counts each row once, so "x copy"
# is against the kernel's floor), with g155_gather_evict_last.patch applied (B: source rows at evict-last, the
# default of the patched tree; A: DMOE_QUANT_GATHER_EVICT_NORMAL=1, main's behaviour), two rounds alternated at
# qwen3_30b and dsv3_prefill beside the contiguous and M-distinct-row forms; then ncu of the _gk kernel in both arms
# and of the contiguous form: DRAM bytes read (the 33.5 MB source once, or the 268 MB of routed rows), L2 hit rate,
# issue and stall figures. Any card; ~200 s on a fresh machine.
RUN_NAME=r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
git apply docs/gpu_runs/2026-12-07-s75/g155_gather_evict_last.patch || { echo "the G155 patch does not apply"; exit 2; }
OUT=$L scripts/quick_build.sh bench_quantize || exit 1
echo "built at $((SECONDS-T0)) s"
env_arm .envA DMOE_QUANT_GATHER_EVICT_NORMAL=1 bench/bench_quantize
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
cases=fp8bw_rows_cols,fp8bw_rows_cols_gc,fp8bw_rows_cols_gk,mxfp8s_rows_cols_gk
ARM_TIMEOUT=60 arm_rounds quant 2 "A B" "_rows_cols" bench/bench_quantize --shapes qwen3_30b,dsv3_prefill --cases $cases
ncu_case() {  # ncu_case TAG ENV CASE: one launch of CASE's kernel at qwen3_30b under ENV (VAR=value or "")
  local tag=$1 env=$2 c=$3
  [ "$(left)" -gt 45 ] || return 0
  timeout 60 env $env ncu --clock-control none --kernel-name-base demangled -k "regex:quantize_rows_cols_kernel" \
    --launch-skip 1 -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum \
    build-gpu/bench/bench_quantize --shapes qwen3_30b --cases "$c" --iters 1 --sustain-ms 0 > $L/ncu_$tag.txt 2>&1
  echo "ncu $tag rc=$? at $((SECONDS-T0)) s: $(grep -E "^ +(Duration|DRAM Throughput|L2 Hit Rate|Issue Slots Busy|No Eligible|dram__bytes_read.sum|dram__bytes_write.sum|lts__t_sectors_srcunit_tex_op_read.sum|lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum) " $L/ncu_$tag.txt | sed -E 's/ +/ /g' | tr '\n' ';')"
}
ncu_case gk_A DMOE_QUANT_GATHER_EVICT_NORMAL=1 fp8bw_rows_cols_gk
ncu_case gk_B "" fp8bw_rows_cols_gk
ncu_case contiguous "" fp8bw_rows_cols
