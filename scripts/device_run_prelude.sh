# Sourced by the one-call device run scripts (docs/gpu_runs/*/scripts/run*.sh) after they set
# RUN_NAME: logs in L=/tmp/$RUN_NAME, packed into $OUT/logs.tar.gz when the script exits; the torch
# venv's NCCL first on the library path (the system's older one clashes), NVLink multicast off;
# T0 and left() (seconds before the ~540 s mark, past which scripts start no new step).
O=${OUT:-/tmp/o}; L=/tmp/${RUN_NAME:?set RUN_NAME before sourcing}; mkdir -p "$O" "$L"
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf "$O/logs.tar.gz" -C "$L" . ; echo "all done at $((SECONDS - T0)) s"; }
trap finish EXIT
left() { echo $((540 - (SECONDS - T0))); }
