#!/usr/bin/env bash
# s54 r1: the torch tests, first the files s53 and s54 changed (s53's run5 never got a machine):
# upstream's single-rank tolerances, the callback / WGRAD dtype / inference-scratch rows (s53), the
# destination contract, the RMSNorm policy round trip, context-local slot selection, RMSNorm
# inference under make_fx, clip statistics in an inference graph, MXFP8 SAC over clamped SwiGLU,
# no-grad graph replay, Mega SAC and Mega no-grad (s54); then the rest of tests/torch while time is left.
RUN_NAME=torch54; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
export PYTHONPATH=$PWD/python
R=$PWD
first="$R/tests/torch/test_single_rank.py $R/tests/torch/test_mega.py $R/tests/torch/test_mxfp8.py"
(cd /tmp && timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE $first > $L/changed.log 2>&1)
echo "test_single_rank / test_mega / test_mxfp8 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/changed.log)"
grep -E "^(FAILED|ERROR)" $L/changed.log | head -20
t=$(( ${BUDGET:-540} - (SECONDS - T0) - 20 ))  # BUDGET: the call's limit in seconds, if shorter
ign=""; for f in $first; do ign="$ign --ignore $f"; done
[ $t -gt 60 ] && { (cd /tmp && timeout $t python3 -m pytest -q -p no:cacheprovider -rfE "$R/tests/torch" $ign \
  > $L/torch_rest.log 2>&1)
  echo "the rest of tests/torch rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_rest.log)"
  grep -E "^(FAILED|ERROR)" $L/torch_rest.log | head -10; }
