#!/usr/bin/env bash
# s53: the torch tests after upstream's single-rank tolerances (every gradient, the weights' too, at
# 3e-2; K = 6 and the bounded shapes at 2e-2) and three rows of upstream's catalog that had no test
# (callback output contract, W13 / W2 WGRAD dtype mismatch, the inference buffer as scratch); Mega's
# graph replays clamped and padded, MXFP8 Mega inference on dynamic weights == prepared.
# test_single_rank.py and test_mega.py first, then the rest of tests/torch while time is left.
RUN_NAME=torch53; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
export PYTHONPATH=$PWD/python
R=$PWD
(cd /tmp && timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/test_single_rank.py" \
  "$R/tests/torch/test_mega.py" > $L/single_rank.log 2>&1)
echo "test_single_rank.py + test_mega.py rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/single_rank.log)"
grep -E "^(FAILED|ERROR)|Mismatch|Greatest|rel_l2|cos" $L/single_rank.log | head -20
t=$(( ${BUDGET:-540} - (SECONDS - T0) - 20 ))  # BUDGET: the call's limit in seconds, if shorter
[ $t -gt 60 ] && { (cd /tmp && timeout $t python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch" \
  --ignore "$R/tests/torch/test_single_rank.py" --ignore "$R/tests/torch/test_mega.py" > $L/torch_rest.log 2>&1)
  echo "the rest of tests/torch rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_rest.log)"
  grep -E "^(FAILED|ERROR)" $L/torch_rest.log | head -10; }
