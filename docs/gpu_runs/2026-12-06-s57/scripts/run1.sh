#!/usr/bin/env bash
# s57 r1 (one call): the torch package after session 57's weights_preprocess_fn change (the function
# runs again before backward; MXFP8 Mega quantizes its result again there) -- the new rows first, then
# every other torch test (every layer Function's save / restore path changed).
RUN_NAME=s57r1; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch dist-moe dmoe_launch || exit 1
echo "built at $((SECONDS-T0)) s"
export PYTHONPATH=$PWD/python
(cd /tmp && timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE "$OLDPWD/tests/torch/test_single_rank.py" \
  "$OLDPWD/tests/torch/test_mega.py" -k "preprocess or callback_weight_quants or recompute_policy" > $L/new_rows.log 2>&1)
echo "new rows rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/new_rows.log)"
grep -E "^(FAILED|ERROR)" $L/new_rows.log | head
BUDGET=540 torch_tests test_single_rank test_mega test_mxfp8 test_training_loop
