#!/usr/bin/env bash
# s39 r4: the session's final tree (G91 the default, G92 / G93 dropped, grouped_gemm_problem shared by
# the library and the benchmark): every GPU test, the NVFP4 decode layer, and ncu of the NVFP4 W2
# decode GEMM on expanded rows at qwen3_30b T = 128 (three k blocks per tile: where the tile boundary
# costs most; data for the next step, G93's note).
O=${OUT:-/tmp/o}; L=/tmp/s39r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests dmoe_launch bench/bench_grouped_gemm; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gpu_tests.log | head -10
f=$L/layer_dsv3_decode_nvfp4.log
timeout 60 build-gpu/dist-moe bench --shape dsv3_decode --format nvfp4 --mode infer --no-baseline --iters 5 --sustain-ms 100 > $f 2>&1
echo "layer dsv3_decode nvfp4 rc=$?: $(grep -E '^inference forward' $f | awk '{print $3}') ms, $(grep -E '^BF16 layer' $f | awk '{print $4, $5}')"
grep -E '^fwd:(w13|w2) ' $f | head -2
timeout 90 ncu --kernel-name-base demangled -k "regex:Nvfp4SwapAB" -c 1 --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters \
  build-gpu/bench/bench_grouped_gemm --ep 1 --routing random --rounds 1 --iters 1 --shapes qwen3_30b --tokens 128 \
  --ops w2_fprop_nvfp4x > $L/ncu_w2_qwen3_t128.txt 2>&1
echo "ncu rc=$? at $((SECONDS-T0)) s"
grep -E "Duration|Elapsed Cycles|SM Active Cycles|Compute \(SM\) Th|DRAM Through|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Grid Size|Waves Per SM" $L/ncu_w2_qwen3_t128.txt | head -14
