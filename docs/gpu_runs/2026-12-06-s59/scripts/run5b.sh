#!/usr/bin/env bash
# s59 r5b: the README's quick start on a fresh GPU machine in the machine's own environment (r5's
# env -i dropped the PATH entries where this machine keeps cmake and ninja, so build.sh tried to
# apt-get them with no network). The prelude's additions (torch's NCCL first on the library path,
# NVLink multicast off, CUDA's bin on PATH) are undone first, so the commands see what a login does.
P0=$PATH; LD0=${LD_LIBRARY_PATH-}; NVLS0=${NCCL_NVLS_ENABLE-unset}
RUN_NAME=s59r5b; source scripts/device_run_prelude.sh
export PATH=$P0 LD_LIBRARY_PATH=$LD0; [ "$NVLS0" = unset ] && unset NCCL_NVLS_ENABLE
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
echo "PATH=$PATH"; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}"; command -v cmake ninja nvcc g++ python3 | tr '\n' ' '; echo
s=$SECONDS; scripts/run.sh > $L/run_sh.log 2>&1; rc=$?
echo "scripts/run.sh rc=$rc in $((SECONDS - s)) s"; tail -14 $L/run_sh.log
s=$SECONDS; timeout $(( $(left) - 20 )) scripts/test.sh > $L/test_sh.log 2>&1; rc=$?
echo "scripts/test.sh rc=$rc in $((SECONDS - s)) s"; grep -E "tests passed|tests failed|Failed|Not Run|\*\*\*" $L/test_sh.log | tail -8
build/dist-moe info > $L/info.log 2>&1; echo "info rc=$?"; grep -i nccl $L/info.log | head -4
