#!/usr/bin/env bash
# s60 r2: G126 after r1 (an H100), three arms alternated on one machine: A = main (the whole
# ../g126_nvfp4_weight_order.patch reversed), B = the weight order with the cheaper encode (the
# working tree with ../g126_weight_scale_cvt.patch reversed), C = the working tree: B + the weights'
# scale factor by one cvt (689 loop instructions per stage against main's 801). On C: the NVFP4 GEMM
# gtests (the new tiny-block-scale rows: subnormal FP16 weight operands), Mega, expand, quantizer
# gtests, test_prepare.py, test_nvfp4.py, test_mega.py. Then A B C alternated: the decode GEMMs at
# dsv3_decode EP1 and at --ep 128 --tokens 2 (in L2), the dsv3_decode NVFP4 layer staged and Mega,
# the NVFP4 weight quantizer (A / C).
RUN_NAME=s60r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D=docs/gpu_runs/2026-12-06-s60
rm -rf .abtree_b && mkdir -p .abtree_b && tar -cf - --exclude='./build*' --exclude='./.abtree*' . | tar -xf - -C .abtree_b
(cd .abtree_b && patch -s -R -p1 < $D/g126_weight_scale_cvt.patch) || { echo "B: the cvt patch does not reverse"; exit 1; }
(cd .abtree_b && OUT=$L/Bb BUILD_DIR=build-b scripts/quick_build.sh dist-moe bench_grouped_gemm) > $L/b_build.txt 2>&1 &
b=$!
OUT=$L scripts/ab_trees.sh $PWD/$D/g126_nvfp4_weight_order.patch \
  "dist-moe bench_grouped_gemm bench_quantize dist_moe_gpu_tests dist_moe_torch dist_moe_native" \
  "dist-moe bench_grouped_gemm bench_quantize" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
wait $b || { tail -20 $L/b_build.txt; exit 1; }
echo "built A/B/C at $((SECONDS-T0)) s"
bin() { case $1 in A) echo .abtree/build-ab;; B) echo .abtree_b/build-b;; C) echo build-gpu;; esac; }
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
grep -cE '^\[       OK \] .*TinyBlockScales' $L/gtest_nvfp4.log | sed 's/^/tiny-block-scale rows passed: /'
BUDGET=200 torch_tests test_prepare test_nvfp4 test_mega 2> /dev/null | grep -v torch_rest
for r in 1 2; do
  for arm in A B C; do
    [ "$(left)" -lt 190 ] && break 2
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
      [ "$(left)" -lt 45 ] && break 3
      f=$L/layer_${pipe}_$arm$r.log
      p=""; [ $pipe = mega ] && p="--pipeline mega"
      timeout 60 $(bin $arm)/dist-moe bench --shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 \
        --sustain-ms 50 $p > $f 2>&1
      echo "layer $pipe $arm$r: $(grep -E '^(inference forward|BF16 layer) |^fwd:(w13|w2|mega) .*GB' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
    done
  done
done
for r in 1 2; do
  for arm in A C; do
    [ "$(left)" -lt 20 ] && break 2
    f=$L/quant_$arm$r.log
    timeout 20 $(bin $arm)/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --cases nvfp4_w --iters 10 \
      --sustain-ms 50 > $f 2>&1
    echo "quantize nvfp4_w $arm$r: $(grep -E '^(dsv3_prefill|qwen3_30b) +nvfp4_w ' $f | awk '{print $1, $3, $4, $5}' | tr '\n' ';')"
  done
done
