#!/usr/bin/env bash
# s58 r2: G121, the NVFP4 decode loop's integer-pipe diet, three arms alternated on one machine:
# A = main, B = ../g121_nvfp4_alu_diet.patch (the weight scale byte by one byte permute; the odd codes'
# shift as IMAD.HI on the FMA pipe), C = B without ../g121_madhi_part.patch (the permute only).
# GEMM rows at dsv3_decode EP1 (the real weight stream) and at --ep 128 --tokens 4 (two experts whose
# weights stay in L2: the kernels' compute ceiling, what an H100's copy rate hides), then the NVFP4
# decode layer, staged and Mega. The NVFP4 GEMM, Mega and quantizer gtests on B, and the world-size-1
# trap rows (tests/torch/test_traps.py; r1 ran them from a patch: 3 of 4, the MXFP8 overflow did not
# overflow at one rank, now with ragged counts whose padding does).
RUN_NAME=s58r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s58
patch -s -p1 --forward < $D/g121_nvfp4_alu_diet.patch || { echo "the patch does not apply"; exit 1; }
A_TREE=.abtree_c scripts/ab_trees.sh --tree-only $D/g121_madhi_part.patch || exit 1
(cd .abtree_c && OUT=$L/C BUILD_DIR=build-c scripts/quick_build.sh dist-moe bench_grouped_gemm) > $L/c_build.txt 2>&1 &
c=$!
OUT=$L scripts/ab_trees.sh $D/g121_nvfp4_alu_diet.patch "dist-moe bench_grouped_gemm dist_moe_gpu_tests dist_moe_torch" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
wait $c || { cat $L/c_build.txt; exit 1; }
echo "built A/B/C at $((SECONDS-T0)) s"
bin() { case $1 in A) echo .abtree/build-ab;; B) echo build-gpu;; C) echo .abtree_c/build-c;; esac; }
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
R=$PWD
(cd /tmp && PYTHONPATH=$R/python timeout 150 python3 -u -m pytest -v -p no:cacheprovider -rfE "$R/tests/torch/test_traps.py" > $L/traps.log 2>&1)
echo "test_traps rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/traps.log)"
grep -E "^FAILED|required_receive_rows" $L/traps.log | head -8
for r in 1 2; do
  for arm in A B C; do
    [ "$(left)" -lt 200 ] && break 2
    for ep in 1 128; do
      extra=""; [ $ep = 128 ] && extra="--tokens 4"
      f=$L/gemm_ep${ep}_$arm$r.log
      timeout 60 $(bin $arm)/bench/bench_grouped_gemm --shapes dsv3_decode --ep $ep $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
      echo "gemm ep$ep $arm$r: $(grep -E '^bs ' $f | awk '{print $4, $6, "ms x copy", $14, "x bf16", $NF}' | tr '\n' ';')"
    done
  done
done
for r in 1 2; do
  for pipe in staged mega; do
    for arm in A B C; do
      [ "$(left)" -lt 30 ] && break 3
      f=$L/layer_${pipe}_$arm$r.log
      p=""; [ $pipe = mega ] && p="--pipeline mega"
      timeout 60 $(bin $arm)/dist-moe bench --shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 \
        --sustain-ms 50 $p > $f 2>&1
      echo "layer $pipe $arm$r: $(grep -E '^(inference forward) |^fwd:(w13|w2|mega) .*GB' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
    done
  done
done
