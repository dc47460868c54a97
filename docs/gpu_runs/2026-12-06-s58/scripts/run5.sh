#!/usr/bin/env bash
# s58 r5: the VMM device claim moved into platform::VmmRange (CPU-tested against a scripted driver):
# the activation buffer gtests on the real driver (a second VMM buffer refused, a new one after
# close), test_vmm.py (a second VMM context refused, close and create again, host-overflow layers).
RUN_NAME=s58r5; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
gtests buffers 'ActivationBuffer*:*Planner*' 120
R=$PWD
pytest_log vmm 200 "$R/tests/torch/test_vmm.py"
