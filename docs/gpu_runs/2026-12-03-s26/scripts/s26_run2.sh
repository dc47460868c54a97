#!/usr/bin/env bash
# Session 26 run 2: (1) the wgmma rate per shape (bench_wgmma_rate, new); (2) NVFP4 decode, main's
# two-warpgroup 16 tile (A, .abtree) against the branch's four-warpgroup one (B), alternated;
# (3) ncu of both decode kernels (W13, W2).
O=${OUT:-/tmp/o}; mkdir -p $O
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $O/build_$3.log 2>&1; }
cfg . build-gpu B && cmake --build build-gpu -j 16 --target dist-moe dmoe_launch bench_wgmma_rate >> $O/build_B.log 2>&1 || { tail -20 $O/build_B.log; exit 1; }
cfg .abtree build-ab A && cmake --build build-ab -j 16 --target dist-moe >> $O/build_A.log 2>&1 || { tail -20 $O/build_A.log; exit 1; }
echo "builds done at $((SECONDS-T0)) s"
build-gpu/bench/bench_wgmma_rate > $O/wgmma_rate.log 2>&1; echo "wgmma rc=$?"; sed -n '/^family/,$p' $O/wgmma_rate.log
b() { timeout 90 $1/dist-moe bench --shape dsv3_decode --format nvfp4 --mode infer --no-baseline --iters 10 --sustain-ms 50; }
for r in 1 2 3; do
  for side in A B; do
    d=build-gpu; [ $side = A ] && d=build-ab
    b $d > $O/ab_${side}_$r.log 2>&1
    echo "$side r$r: $(grep -E '^fwd:w13  ' $O/ab_${side}_$r.log | head -1 | awk '{print "w13",$2}') $(grep -E '^fwd:w2  ' $O/ab_${side}_$r.log | head -1 | awk '{print "w2",$2}') $(grep -E '^inference forward' $O/ab_${side}_$r.log | awk '{print "fwd",$3}') $(grep -E '^BF16 layer' $O/ab_${side}_$r.log | awk '{print "bf16",$4, $5}')"
  done
done
echo "ab done at $((SECONDS-T0)) s"
reasons=""; for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping mio_throttle short_scoreboard selected dispatch_stall no_instructions misc lg_throttle drain branch_resolving; do reasons+="${reasons:+,}smsp__pcsamp_warps_issue_stalled_$r"; done
for side in B A; do
  d=build-gpu; [ $side = A ] && d=build-ab
  timeout 150 ncu --kernel-name-base demangled -k "regex:Nvfp4SwapAB" -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    --section SourceCounters --metrics "$reasons" $d/dist-moe bench-rank --shape dsv3_decode --format nvfp4 --mode infer --iters 2 > $O/ncu_$side.txt 2>&1
  echo "ncu $side rc=$?"
  grep -E "Duration|Compute \(SM\) Th|DRAM Through|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Registers Per|Block Size|pipeline is|Issued Warp Per" $O/ncu_$side.txt | head -24
  grep -E "smsp__pcsamp_warps_issue_stalled" $O/ncu_$side.txt | sort -k3 -rn | head -14
done
timeout 60 ncu --query-metrics > $O/ncu_metrics.txt 2>&1; grep -E "pipe_tensor|gmma|pipe_alu |pipe_fma |pipe_fp16" $O/ncu_metrics.txt | head -20
echo "all done at $((SECONDS-T0)) s"
