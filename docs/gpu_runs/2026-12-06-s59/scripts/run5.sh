#!/usr/bin/env bash
# s59 r5: the README's quick start, verbatim, on a fresh GPU machine (last checked in s15 r4): the two
# commands in a clean environment (env -i: no PATH additions, no library path, no NCCL settings),
# each timed, then what `dist-moe info` says of the NCCL built with and loaded.
RUN_NAME=s59r5; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
clean() { env -i HOME="$HOME" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -c "$*"; }
s=$SECONDS; clean scripts/run.sh > $L/run_sh.log 2>&1; rc=$?
echo "scripts/run.sh rc=$rc in $((SECONDS - s)) s"; tail -12 $L/run_sh.log
s=$SECONDS; clean scripts/test.sh > $L/test_sh.log 2>&1; rc=$?
echo "scripts/test.sh rc=$rc in $((SECONDS - s)) s"; grep -E "tests passed|tests failed|Failed|Not Run" $L/test_sh.log | tail -6
clean build/dist-moe info > $L/info.log 2>&1; echo "info rc=$?"; grep -i nccl $L/info.log | head -4
