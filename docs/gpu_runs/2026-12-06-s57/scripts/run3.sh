#!/usr/bin/env bash
# s57 r3 (one call): r2's rows again after their fixes -- the BF16 joint make_fx rows with the
# parameters as trace inputs (fake mode copies no grad_dtype), and test_vmm with Context.memory_plan
# the native context's resolved plan (its VMM sections) -- then test_single_rank, test_nvfp4 and the
# MXFP8 / Mega files whole; on an H200 only, G119's MXFP8 / NVFP4 rest A/B (s56's run3.sh).
RUN_NAME=s57r3; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
export PYTHONPATH=$PWD/python
R=$PWD
(cd /tmp && timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/test_single_rank.py" \
  "$R/tests/torch/test_mxfp8.py" -k "accumulators_are_visible" > $L/make_fx.log 2>&1)
echo "joint make_fx rows rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/make_fx.log)"
grep -E "^(FAILED|ERROR)|^E  " $L/make_fx.log | head -8
(cd /tmp && timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/test_vmm.py" > $L/vmm.log 2>&1)
echo "test_vmm rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/vmm.log)"
grep -E "^(FAILED|ERROR)|^E  " $L/vmm.log | head -12
(cd /tmp && timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/test_single_rank.py" \
  "$R/tests/torch/test_nvfp4.py" "$R/tests/torch/test_mxfp8.py" "$R/tests/torch/test_mega.py" > $L/files.log 2>&1)
echo "test_single_rank, test_nvfp4, test_mxfp8, test_mega rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/files.log)"
grep -E "^(FAILED|ERROR)" $L/files.log | head -12
if [[ $gpu == *H200* ]]; then
  OUT=$L/r3 LIMIT=$(( 560 - (SECONDS - T0) )) bash docs/gpu_runs/2026-12-06-s56/scripts/run3.sh
fi
