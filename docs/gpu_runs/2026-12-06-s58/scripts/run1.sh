#!/usr/bin/env bash
# s58 r1: the torch files the s57 review mend refactored (test_vmm's make_case, run_train in
# moe_reference), then upstream's routing-shape traps at world size 1 (../traps_unverified.patch: each
# scenario in its own process, which flushes the device diagnostic and leaves with os._exit, dumps its
# Python stack after 60 s; the test gives each 90 s).
RUN_NAME=s58r1; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[ -f tests/torch/test_traps.py ] || patch -s -p1 --forward < docs/gpu_runs/2026-12-06-s58/traps_unverified.patch || exit 1
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
R=$PWD
pytest_log vmm_single_rank 150 "$R/tests/torch/test_vmm.py" "$R/tests/torch/test_single_rank.py"
(cd /tmp && PYTHONPATH=$R/python timeout 400 python3 -u -m pytest -v -p no:cacheprovider -rfE "$R/tests/torch/test_traps.py" > $L/traps.log 2>&1)
echo "test_traps rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/traps.log)"
grep -E "PASSED|FAILED|ERROR" $L/traps.log | head -12
grep -E "missing|assert|Timeout|Thread|File \"" $L/traps.log | head -30
