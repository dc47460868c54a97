#!/usr/bin/env bash
# s58 r10: G122 (../g122_tile_lead.patch: a tile's first-stage weight scales loaded under the previous
# tile's epilogue) A / B: the NVFP4 decode GEMMs on expanded rows at qwen3_30b T = 128 and dsv3_decode
# EP1, alternated twice; the NVFP4 GEMM / Mega / quantizer gtests on B.
RUN_NAME=s58r10; source scripts/device_run_prelude.sh
left() { echo $(( ${LIMIT:-200} - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s58
patch -s -p1 --forward < $D/g122_tile_lead.patch || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $D/g122_tile_lead.patch "bench_grouped_gemm dist_moe_gpu_tests" "bench_grouped_gemm" ||
  { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built A/B at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 60
pick() { grep '(pick)' "$1" | awk '{for (i = 1; i <= NF; i++) if ($i == "(pick)") printf "%s %s ms, x copy %s; ", $4, $(i + 1), $(i + 9)}'; }
for r in 1 2; do
  for side in A B; do
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    for shape in qwen3_30b dsv3_decode; do
      [ "$(left)" -lt 15 ] && break 3
      extra=""; [ $shape = qwen3_30b ] && extra="--tokens 128"
      f=$L/gemm_${shape}_$side$r.log
      timeout 40 $b/bench/bench_grouped_gemm --shapes $shape $extra --ep 1 --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
      echo "$shape $side$r: $(pick $f)"
    done
  done
done
