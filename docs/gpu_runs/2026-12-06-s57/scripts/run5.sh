#!/usr/bin/env bash
# s57 r5 (one call): the activation buffer's VMM mapping moved into platform::VmmRange (same driver
# calls; handles created before mapping, the range freed once nothing is mapped) -- the VMM buffer
# gtest and test_vmm on the real driver, then the single-rank torch file (contexts made and closed).
RUN_NAME=s57r5; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
gtests buffers 'ActivationBuffer*:*Planner*' 120
export PYTHONPATH=$PWD/python
R=$PWD
(cd /tmp && timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/test_vmm.py" \
  "$R/tests/torch/test_single_rank.py" > $L/torch.log 2>&1)
echo "test_vmm, test_single_rank rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
grep -E "^(FAILED|ERROR)|^E  " $L/torch.log | head -12
if [[ $gpu == *H200* ]]; then
  OUT=$L/r3 LIMIT=$(( 560 - (SECONDS - T0) )) bash docs/gpu_runs/2026-12-06-s56/scripts/run3.sh
fi
