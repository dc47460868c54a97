#!/usr/bin/env bash
# s36 r2: r1's failures -- the emulated GPU tests after the MXFP8-inference preparation fix; diagnostics of
# the no-grad fault at D=F=128 and of the MXFP8 clamped case (diag_r2.py); the emulated torch cases again.
O=${OUT:-/tmp/o}; L=/tmp/s36r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 DMOE_COMM_TIMEOUT_MS=10000
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
[ -x build-gpu/tests/dist_moe_gpu_tests ] || { echo "build failed"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*Emulated*' > $L/emulated.log 2>&1
echo "emulated rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/emulated.log | tr '\n' ' ')"
grep -E "Failure|exception|Expected|Which is|relL2|^\[  FAILED" $L/emulated.log | head -20
D=docs/gpu_runs/2026-12-04-s36/scripts/diag_r2.py
export PYTHONPATH=$PWD/python
for wr in "1 0" "2 1" "2 0" "4 3"; do
  timeout 60 python3 $D fault $wr > $L/fault_${wr// /_}.log 2>&1; echo "rc=$? $(grep -E '^fault' $L/fault_${wr// /_}.log | tr '\n' ' ')"
done
if grep -q ERROR $L/fault_*.log; then
  bad=$(grep -l ERROR $L/fault_*.log | head -1 | sed 's/.*fault_//; s/.log//; s/_/ /')
  timeout 240 compute-sanitizer --tool memcheck --print-limit 5 python3 $D fault $bad > $L/sanitizer.log 2>&1
  echo "sanitizer ($bad) rc=$?"; grep -E "Invalid|at 0x|by thread|Address|kernel|ERROR SUMMARY" $L/sanitizer.log | head -14
fi
for wr in "1 0" "2 1"; do
  timeout 90 python3 $D clamped $wr > $L/clamped_${wr// /_}.log 2>&1; echo "rc=$? $(grep -E '^clamped|Error' $L/clamped_${wr// /_}.log | tail -1)"
done
timeout 200 python3 -m pytest -q tests/torch/test_two_rank.py -k emulated > $L/torch_emulated.log 2>&1
echo "torch emulated rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_emulated.log)"
grep -E "^FAILED" $L/torch_emulated.log | head -20
