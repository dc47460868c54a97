#!/usr/bin/env bash
# s57 r4 (one call): block-scaled calls record their static scratch layout as the scratch peak (the
# planner kernels), so check_overflow sees block-scaled scratch -- test_vmm again (r3: the BF16 row
# passed, the block-scaled rows saw no scratch use), then the torch files of every block-scaled
# pipeline and the checkpointing file (scratch peaks); on an H200, G119's rest A/B after them.
RUN_NAME=s57r4; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
export PYTHONPATH=$PWD/python
R=$PWD
(cd /tmp && timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/test_vmm.py" > $L/vmm.log 2>&1)
echo "test_vmm rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/vmm.log)"
grep -E "^(FAILED|ERROR)|^E  " $L/vmm.log | head -12
(cd /tmp && timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/test_mxfp8.py" \
  "$R/tests/torch/test_nvfp4.py" "$R/tests/torch/test_fp8_blockwise.py" "$R/tests/torch/test_mega.py" \
  "$R/tests/torch/test_checkpointing.py" > $L/files.log 2>&1)
echo "test_mxfp8, test_nvfp4, test_fp8_blockwise, test_mega, test_checkpointing rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/files.log)"
grep -E "^(FAILED|ERROR)" $L/files.log | head -12
if [[ $gpu == *H200* ]]; then
  OUT=$L/r3 LIMIT=$(( 560 - (SECONDS - T0) )) bash docs/gpu_runs/2026-12-06-s56/scripts/run3.sh
fi
