#!/usr/bin/env bash
# s42 r1: the first GPU run of sessions 40-42's Mega code (G94 decode, G95 rows form, G96 fused W2
# DGRAD + SwiGLU backward): build, the Mega and DgradSwigluMxfp8 GEMM tests first (a hang traps after
# the spin timeout), every GPU test, the MXFP8 and NVFP4 layer suites (their Mega cases set
# DMOE_EXPERIMENTAL_MEGA themselves). Stops starting steps past ~540 s (the device call's 600 s).
O=${OUT:-/tmp/o}; L=/tmp/s42r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
left() { echo $((540 - (SECONDS - T0))); }
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests dmoe_launch; do
  [ -x build-gpu/$b ] || { echo "missing $b"; grep -E "error|FAILED" $L/build.log | head -20; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
DMOE_COMM_TIMEOUT_MS=10000 timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Mega*:DgradSwigluMxfp8*' \
  > $L/mega_gemm_tests.log 2>&1
echo "mega GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/mega_gemm_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|differ|Expected" $L/mega_gemm_tests.log | head -20
[ "$(left)" -gt 150 ] || exit 0
DMOE_COMM_TIMEOUT_MS=10000 timeout $(( $(left) - 60 )) build-gpu/tests/dist_moe_gpu_tests --gtest_filter='-Mega*:DgradSwigluMxfp8*' \
  > $L/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gpu_tests.log | head -10
for t in mxfp8_pipeline nvfp4_pipeline; do
  [ "$(left)" -gt 30 ] || break
  timeout 100 build-gpu/dmoe_launch -n 1 --timeout 95 -- build-gpu/tests/dist_moe_${t}_tests > $L/suite_$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$t.log | head -3 | tr '\n' ' ')"
done
