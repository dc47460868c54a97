#!/usr/bin/env bash
# s59 r9: the final tree's context builds beyond world size 1 (the build now starts the VMM prefetch
# before the windows and closes it on failure): the emulated-peer gtests and test_two_rank.py (one
# emulated rank of EP2 / EP4; its real two-rank rows skip on one GPU), then test_vmm.py again.
RUN_NAME=s59r9; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
gtests emulated '*Emulated*:ActivationBuffer*' 200
R=$PWD
pytest_log two_rank 240 "$R/tests/torch/test_two_rank.py"
[ "$(left)" -gt 60 ] && pytest_log vmm $(( $(left) - 10 )) "$R/tests/torch/test_vmm.py"
