#!/usr/bin/env bash
# s59 r8: r7 with its ncu filter mended (the demangled arguments read "(int)192, (int)16"); G125 again -- on any GPU, ncu's scheduler / warp-state sections of one launch of each W2
# decode tile at dsv3_decode (r6's kernel filter matched nothing: ncu matches the demangled name,
# whose template arguments name the tile), then on an H200 the --sweep timing of both tiles (three
# rounds) at dsv3_decode and qwen3_30b T = 512.
RUN_NAME=s59r8; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
B=build-gpu/bench/bench_grouped_gemm
for tile in 256 192; do
  timeout 90 ncu --kernel-name-base demangled -k "regex:sm90_grouped_gemm.*\(int\)${tile}, \(int\)16, \(int\)5" -c 1 \
    --section SchedulerStats --section WarpStateStats --section SpeedOfLight \
    $B --shapes dsv3_decode --ep 1 --routing balanced --ops w2_fprop_nvfp4x --iters 1 --sustain-ms 0 --sweep \
    > $L/ncu_$tile.txt 2>&1
  echo "ncu $tile rc=$?: $(grep -E 'SM Frequency|Duration|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|Eligible Warps Per|DRAM Throughput' $L/ncu_$tile.txt | sed -E 's/ +/ /g' | tr '\n' ';')"
done
[[ $gpu == *H200* ]] || { echo "not an H200: no timing"; exit 0; }
for r in 1 2 3; do
  f=$L/sweep_dsv3_$r.log
  timeout 90 $B --shapes dsv3_decode --ep 1 --routing balanced --ops w2_fprop_nvfp4x --iters 10 --sustain-ms 100 \
    --sweep > $f 2>&1
  echo "dsv3_decode W2 round $r rc=$?:"; grep -E "nvfp4x" $f | grep -E "256x16x|192x16x" | sed -E 's/ +/ /g' | cut -c1-150
done
f=$L/sweep_qwen3_512.log
timeout 90 $B --shapes qwen3_30b --tokens 512 --ep 1 --routing balanced --ops w2_fprop_nvfp4x --iters 20 \
  --sustain-ms 100 --sweep > $f 2>&1
echo "qwen3_30b T=512 W2 rc=$?:"; grep -E "nvfp4x" $f | grep -E "256x16x|192x16x" | sed -E 's/ +/ /g' | cut -c1-150
