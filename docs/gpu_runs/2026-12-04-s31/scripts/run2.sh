#!/usr/bin/env bash
# s31 r2 (main's kernels): where the FP8-blockwise WGRAD loses (G67 showed the wgmma queue's drain
# is not it): Nsight Compute speed-of-light, compute, memory, warp-state and scheduler sections of
# the FP8 WGRAD (128x128) and our BF16 WGRAD at mixtral and qwen3_30b EP2 W13 sizes, one launch each.
O=${OUT:-/tmp/o}; L=/tmp/s31r2; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_grouped_gemm >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
prof() {  # tag shape kernel-regex
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$3" --launch-skip 2 -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats -o $L/$1 \
    build-gpu/bench/bench_grouped_gemm --ep 2 --shapes $2 --routing balanced --ops w13_wgrad_fp8 --iters 3 --sustain-ms 0 > $L/$1_run.txt 2>&1
  echo "ncu $1 rc=$? at $((SECONDS-T0)) s"
  timeout 60 ncu --import $L/$1.ncu-rep --page details > $L/$1_details.txt 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Executed Ipc Active|Issue Slots Busy|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Mem Busy|Max Bandwidth|Mem Pipes Busy|No Eligible|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Stall" $L/$1_details.txt | tr -s ' ' | head -40
}
FP8='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)2'
BF16='GroupedGemmKernel<dist_moe::gemm::Sm90Mainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)2'
prof fp8_mixtral mixtral "$FP8"
prof bf16_mixtral mixtral "$BF16"
prof fp8_qwen3 qwen3_30b "$FP8"
timeout 60 ncu --import $L/fp8_mixtral.ncu-rep --page raw > $L/fp8_mixtral_raw.txt 2>&1
grep -E "pipe_tensor|lts__t_bytes.sum.per_second|lts__t_sectors_op_read.sum |l1tex__m_xbar2l1tex_read_bytes|sm__inst_executed_pipe_fma|sm__inst_executed_pipe_fp|smsp__inst_executed.sum " $L/fp8_mixtral_raw.txt | tr -s ' ' | head -30
