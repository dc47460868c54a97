#!/usr/bin/env bash
# s59 r10: after the review mend (one VmmRange::Layout for the range and the prefetch): the
# activation-buffer gtests (the prefetched buffer among them) and test_vmm.py on the real driver.
RUN_NAME=s59r10; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
gtests buffers 'ActivationBuffer*' 120
pytest_log vmm 150 "$PWD/tests/torch/test_vmm.py"
