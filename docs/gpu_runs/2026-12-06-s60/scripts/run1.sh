#!/usr/bin/env bash
# s60 r1: G126, prepared NVFP4 weights in the GEMMs' bit order (12 instructions per word instead of
# 15), three arms alternated on one machine: A = main (the patch reversed), B = the working tree
# (../g126_nvfp4_weight_order.patch applied), C = B + s58's g119_nvfp4_over_s58.patch (warp-uniform
# descriptors). On B: the NVFP4 GEMM / Mega / expand / quantizer gtests, test_prepare.py and
# test_nvfp4.py. Then, A B C alternated: the decode GEMMs at dsv3_decode EP1 (the real weight
# stream) and at --ep 128 --tokens 2 (two experts in L2: the 16-token tile's compute ceiling), the
# dsv3_decode NVFP4 layer staged and Mega, and the NVFP4 weight quantizer (A / B).
RUN_NAME=s60r1; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s60
P=$PWD/$D/g126_nvfp4_weight_order.patch
rm -rf .abtree_c && mkdir -p .abtree_c && tar -cf - --exclude='./build*' --exclude='./.abtree*' . | tar -xf - -C .abtree_c
(cd .abtree_c && patch -s -p1 < docs/gpu_runs/2026-12-06-s58/g119_nvfp4_over_s58.patch) || { echo "C: g119 does not apply"; exit 1; }
(cd .abtree_c && OUT=$L/C BUILD_DIR=build-c scripts/quick_build.sh dist-moe bench_grouped_gemm) > $L/c_build.txt 2>&1 &
c=$!
OUT=$L scripts/ab_trees.sh $P "dist-moe bench_grouped_gemm bench_quantize dist_moe_gpu_tests dist_moe_torch dist_moe_native" \
  "dist-moe bench_grouped_gemm bench_quantize" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
wait $c || { tail -20 $L/c_build.txt; exit 1; }
echo "built A/B/C at $((SECONDS-T0)) s"
bin() { case $1 in A) echo .abtree/build-ab;; B) echo build-gpu;; C) echo .abtree_c/build-c;; esac; }
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
BUDGET=240 torch_tests test_prepare test_nvfp4 2> /dev/null | grep -v torch_rest
for r in 1 2; do
  for arm in A B C; do
    [ "$(left)" -lt 200 ] && break 2
    for ep in 1 128; do
      extra="--iters 10"; [ $ep = 128 ] && extra="--tokens 2 --iters 50"
      f=$L/gemm_ep${ep}_$arm$r.log
      timeout 60 $(bin $arm)/bench/bench_grouped_gemm --shapes dsv3_decode --ep $ep $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 > $f 2>&1
      echo "gemm ep$ep $arm$r: $(bs_picks $f)"
    done
  done
done
for r in 1 2; do
  for pipe in staged mega; do
    for arm in A B C; do
      [ "$(left)" -lt 70 ] && break 3
      f=$L/layer_${pipe}_$arm$r.log
      p=""; [ $pipe = mega ] && p="--pipeline mega"
      timeout 60 $(bin $arm)/dist-moe bench --shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 \
        --sustain-ms 50 $p > $f 2>&1
      echo "layer $pipe $arm$r: $(grep -E '^(inference forward|BF16 layer) |^fwd:(w13|w2|mega) .*GB' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
    done
  done
done
for r in 1 2; do
  for arm in A B; do
    [ "$(left)" -lt 25 ] && break 2
    f=$L/quant_$arm$r.log
    timeout 20 $(bin $arm)/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --cases nvfp4_w --iters 10 \
      --sustain-ms 50 > $f 2>&1
    echo "quantize nvfp4_w $arm$r: $(grep -E '^(dsv3_prefill|qwen3_30b) +nvfp4_w ' $f | awk '{print $1, $3, $4, $5}' | tr '\n' ';')"
  done
done
