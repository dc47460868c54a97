#!/usr/bin/env bash
# s30 r3 (main's kernels): where the FP8-blockwise 128x256 W13 FPROP loses against its free-operand
# ceiling (G66): Nsight Compute memory and compute sections of it and of the BF16 W13 kernel (qwen3_30b
# EP2 sizes, one launch each), and the GEMM bench on 66 / 99 / 132 SMs (does the time scale per SM?).
O=${OUT:-/tmp/o}; L=/tmp/s30r3; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_grouped_gemm >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 90 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral --routing balanced --rounds 1 --sustain-ms 100 \
  --ops w13_fprop_fp8,w2_fprop_fp8 --sms 66,99 > $L/gemm_sms.log 2>&1
echo "GEMM on 66/99/132 SMs rc=$?"; grep -E "^fp8 " $L/gemm_sms.log | tr -s ' ' | cut -c1-150
prof() {  # tag regex
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$2" --launch-skip 2 -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section Occupancy -o $L/$1 \
    build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b --routing balanced --ops w13_fprop_fp8 --iters 3 --sustain-ms 0 > $L/$1_run.txt 2>&1
  echo "ncu $1 rc=$? at $((SECONDS-T0)) s"
  timeout 60 ncu --import $L/$1.ncu-rep --page details > $L/$1_details.txt 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Shared Memory|Bank|Executed Ipc Active|Issue Slots Busy|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Mem Busy|Max Bandwidth|Mem Pipes Busy" $L/$1_details.txt | head -40
}
prof fp8w13 'Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, \(int\)128, \(int\)256'
prof bf16w13 'GroupedGemmKernel<dist_moe::gemm::Sm90Mainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, \(int\)128, \(int\)256'
