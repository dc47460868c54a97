#!/usr/bin/env bash
# s76, not run (the device time went to r2 / r3): what issue #25 (MXFP8) still owes an H200 beyond r1 -- the
# MXFP8 and FP8-blockwise decode layers against our BF16 decode (dsv3_decode, inference), then the torch
# package's tests: the MXFP8 / Mega / training loop / preparation / FP8-blockwise files first, then the rest of
# tests/torch. Any card; the first line names it. ~500 s on a fresh machine (the torch extension's build is
# ~2-3 min).
RUN_NAME=h200_torch; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
for fmt in mxfp8 fp8_blockwise; do
  timeout 60 build-gpu/dist-moe bench --shape dsv3_decode --mode infer --format $fmt --no-baseline --iters 10 \
    --sustain-ms 50 > $L/decode_$fmt.log 2>&1
  echo "decode $fmt rc=$?: $(grep -E '^inference forward|^BF16 layer' $L/decode_$fmt.log | sed -E 's/ +/ /g' | tr '\n' ';')"
done
torch_tests test_mxfp8 test_mega test_training_loop test_prepare test_fp8_blockwise
