#!/usr/bin/env bash
# s59 r6: G125's first step -- the NVFP4 decode W2 (expanded token rows, plain store) on three
# consumer warpgroups of 64 rows (192 x 16 tiles, kernel.cuh's consumer count a parameter) beside the
# 256 x 16 pick. Correctness: the NVFP4 GEMM gtests (every compiled NVFP4 configuration against the
# oracle, the new one included) and the NVFP4 layer suites' GEMM users unchanged (the pick is not
# changed yet). Speed: bench_grouped_gemm --sweep times both tiles in one process (alternated), at
# dsv3_decode EP1 and qwen3_30b T = 128; then ncu's scheduler / warp-state sections of one launch each.
RUN_NAME=s59r6; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:Nvfp4*:MegaNvfp4*' 200
B=build-gpu/bench/bench_grouped_gemm
for r in 1 2; do
  f=$L/sweep_dsv3_$r.log
  timeout 90 $B --shapes dsv3_decode --ep 1 --routing balanced --ops w2_fprop_nvfp4x --iters 10 --sustain-ms 100 \
    --sweep > $f 2>&1
  echo "dsv3_decode W2 round $r rc=$?:"; grep -E "nvfp4x" $f | grep -E "256x16|192x16" | sed -E 's/ +/ /g' | cut -c1-160
done
f=$L/sweep_qwen3_128.log
timeout 90 $B --shapes qwen3_30b --tokens 128 --ep 1 --routing balanced --ops w2_fprop_nvfp4x --iters 20 \
  --sustain-ms 100 --sweep > $f 2>&1
echo "qwen3_30b T=128 W2 rc=$?:"; grep -E "nvfp4x" $f | grep -E "256x16|192x16" | sed -E 's/ +/ /g' | cut -c1-160
for tile in 256 192; do
  [ "$(left)" -lt 60 ] && break
  timeout 60 ncu -k "regex:Li${tile}ELi16ELi5E" -c 1 --section SchedulerStats --section WarpStateStats \
    --section SpeedOfLight $B --shapes dsv3_decode --ep 1 --routing balanced --ops w2_fprop_nvfp4x --iters 1 \
    --sustain-ms 0 --sweep > $L/ncu_$tile.txt 2>&1
  echo "ncu $tile rc=$?: $(grep -E 'Duration|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|DRAM Throughput' $L/ncu_$tile.txt | sed -E 's/ +/ /g' | tr '\n' ';')"
done
