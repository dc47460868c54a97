#!/usr/bin/env bash
# s36 r6: the emulated torch cases after test_two_rank.py keeps the worker's device diagnostics for failure
# messages.
O=${OUT:-/tmp/o}; L=/tmp/s36r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 DMOE_COMM_TIMEOUT_MS=10000
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
PYTHONPATH=$PWD/python timeout 200 python3 -m pytest -q -rs tests/torch/test_two_rank.py -k emulated > $L/torch_emulated.log 2>&1
echo "torch emulated rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_emulated.log)"
grep -E "^FAILED" $L/torch_emulated.log | head -5
