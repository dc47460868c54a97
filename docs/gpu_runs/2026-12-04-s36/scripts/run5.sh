#!/usr/bin/env bash
# s36 r5: the emulated GPU tests with the CUDA-graph cases (EmulatedPeersGraph: BF16 training EP2, FP8-blockwise
# training EP4, NVFP4 inference EP2; replay == eager bitwise).
O=${OUT:-/tmp/o}; L=/tmp/s36r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 DMOE_COMM_TIMEOUT_MS=10000
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target dist_moe_gpu_tests ) > $L/build.log 2>&1
[ -x build-gpu/tests/dist_moe_gpu_tests ] || { echo "build failed"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*Emulated*' > $L/emulated.log 2>&1
echo "emulated rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/emulated.log | tr '\n' ' ')"
grep -E "Failure|exception|differs|^\[  FAILED|^\[       OK" $L/emulated.log | cut -c1-160 | head -24
