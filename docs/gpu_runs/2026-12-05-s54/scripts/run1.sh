#!/usr/bin/env bash
# s54 r1: the torch tests, first the files s53 and s54 changed (s53's run5 never got a machine):
# test_single_rank.py, test_mega.py, test_mxfp8.py one at a time within BUDGET (docs/test_coverage.md,
# "Added in session 53 / 54"), then the rest of tests/torch (test_examples_run.py among them) while
# time is left.
RUN_NAME=torch54; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
export PYTHONPATH=$PWD/python
R=$PWD
first="test_single_rank test_mega test_mxfp8"
budget=${BUDGET:-540}  # the call's limit in seconds, if shorter
for f in $first; do  # one file at a time, each within what is left (a short call still gets the first)
  t=$(( budget - (SECONDS - T0) - 15 )); [ $t -gt 30 ] || break
  (cd /tmp && timeout $t python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch/$f.py" > $L/$f.log 2>&1)
  echo "$f rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/$f.log)"
  grep -E "^(FAILED|ERROR)" $L/$f.log | head -20
done
t=$(( budget - (SECONDS - T0) - 15 ))
ign=""; for f in $first; do ign="$ign --ignore $R/tests/torch/$f.py"; done
[ $t -gt 60 ] && { (cd /tmp && timeout $t python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch" $ign \
  > $L/torch_rest.log 2>&1)
  echo "the rest of tests/torch rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_rest.log)"
  grep -E "^(FAILED|ERROR)" $L/torch_rest.log | head -10; }
