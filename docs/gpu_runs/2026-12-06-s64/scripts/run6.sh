#!/usr/bin/env bash
# s64 r6: G137 A / B on any card (perf_history G137: the NVFP4 token-row quantizer's <= 4-vector
# variants at 40 registers, 25 CTAs per SM instead of 21). B = this tree with
# ../g137_token_rows_40_registers.patch applied (here, on the device's copy), A = without it
# (scripts/ab_trees.sh reverses it). On B: the NVFP4 quantizer GPU tests. Alternated, four rounds:
# bench_quantize's NVFP4 token rows at dsv3_prefill (the unchanged 8-vector kernel) and qwen3_30b.
RUN_NAME=s64r6; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s64
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
git apply $D/g137_token_rows_40_registers.patch || { echo "the G137 patch does not apply"; exit 2; }
OUT=$L scripts/ab_trees.sh $PWD/$D/g137_token_rows_40_registers.patch "bench_quantize dist_moe_gpu_tests" \
  bench_quantize || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
gtests nvfp4q 'QuantizeNvfp4*:Nvfp4ExpandRows*' 100
rows() { grep -E '^(dsv3_prefill|qwen3_30b) +nvfp4_token_rows ' "$1" | awk '{printf "%s %s ms copy %s %s; ", $1, $3, $4, $5}'; }
for r in 1 2 3 4; do
  for arm in A B; do
    [ "$(left)" -lt 30 ] && break 2
    f=$L/rows_$arm$r.log
    timeout 40 $(arm_dir $arm)/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --cases nvfp4_token_rows \
      --iters 50 --sustain-ms 100 > $f 2>&1
    echo "token rows $arm$r rc=$?: $(rows $f)"
  done
done
