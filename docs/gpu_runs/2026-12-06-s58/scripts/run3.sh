#!/usr/bin/env bash
# s58 r3: the world-size-1 trap rows again (r2 built no dist_moe_native: every case failed on the
# import), then G121's arm C alone (../g121_scale_permute.patch: the weight scale byte by one byte
# permute) against main, A / B alternated: NVFP4 decode GEMMs at --ep 128 --tokens 2 (8 rows per
# expert: the 16-token tile, two experts whose weights stay in L2 -- r2's --tokens 4 picked the
# 128-token tile) and at dsv3_decode EP1; on an H200 also the NVFP4 decode layer, staged and Mega.
RUN_NAME=s58r3; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s58
patch -s -p1 --forward < $D/g121_scale_permute.patch || { echo "the patch does not apply"; exit 1; }
OUT=$L scripts/ab_trees.sh $D/g121_scale_permute.patch "dist-moe bench_grouped_gemm dist_moe_native dist_moe_torch" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built A/B at $((SECONDS-T0)) s"
R=$PWD
(cd /tmp && PYTHONPATH=$R/python timeout 150 python3 -u -m pytest -v -p no:cacheprovider -rfE "$R/tests/torch/test_traps.py" > $L/traps.log 2>&1)
echo "test_traps rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/traps.log)"
grep -E "PASSED|FAILED" $L/traps.log | head -8
pick() { grep '(pick)' "$1" | awk '{for (i = 1; i <= NF; i++) if ($i == "(pick)") printf "%s %s %s ms, x copy %s; ", $4, $(i - 1), $(i + 1), $(i + 9)}'; }
for r in 1 2 3; do
  for side in A B; do
    [ "$(left)" -lt 150 ] && break 2
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    for ep in 128 1; do
      [ $ep = 1 ] && [ $r = 3 ] && continue
      extra=""; [ $ep = 128 ] && extra="--tokens 2"
      f=$L/gemm_ep${ep}_$side$r.log
      timeout 60 $b/bench/bench_grouped_gemm --shapes dsv3_decode --ep $ep $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
      echo "gemm ep$ep $side$r: $(pick $f)"
    done
  done
done
[[ $gpu == *H200* ]] || exit 0
for r in 1 2; do
  for pipe in staged mega; do
    for side in A B; do
      [ "$(left)" -lt 30 ] && break 3
      b=build-gpu; [ $side = A ] && b=.abtree/build-ab
      f=$L/layer_${pipe}_$side$r.log
      p=""; [ $pipe = mega ] && p="--pipeline mega"
      timeout 60 $b/dist-moe bench --shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 \
        --sustain-ms 50 $p > $f 2>&1
      echo "layer $pipe $side$r: $(grep -E '^(inference forward) |^fwd:(w13|w2|mega) .*GB' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
    done
  done
done
