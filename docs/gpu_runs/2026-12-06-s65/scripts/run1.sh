#!/usr/bin/env bash
# s65 r1, by card. On an H200: s63's r2 as written (issue #26's rows on HEAD; the H200 has not
# measured them since s50), G137 left for the next call. On any other card: s64's r6 (G137 A / B:
# the NVFP4 token-row quantizer's <= 4-vector kernels at 40 registers), then issue #24's whole
# quantizer table twice on B (the patched tree), to see whether 32 of 32 holds with G137.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
[[ $gpu == *H200* ]] && exec bash docs/gpu_runs/2026-12-06-s63/scripts/run2.sh
OUT=$OUT/g137 bash docs/gpu_runs/2026-12-06-s64/scripts/run6.sh  # logs: $OUT/g137/logs.tar.gz
RUN_NAME=s65r1q; source scripts/device_run_prelude.sh
for n in 1 2; do
  f=$L/quantize_B$n.log
  timeout 100 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $f 2>&1
  echo "bench_quantize B$n rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $f)"
  grep -E ' below$' $f | sed 's/^/  /'
  grep -E '^qwen3_30b +nvfp4_token_rows ' $f | sed 's/^/  /'
done
