#!/usr/bin/env bash
# s61 r3: G129 A/B and the NVFP4 checks on the tree. A = this tree without ../g129_mega_w13_uniform.patch
# (main: G128 in the staged kernels only), B = this tree (the Mega kernel's W13 loop with uniform
# descriptors too). On B: the NVFP4 / Mega / expand / NVFP4 quantizer gtests, the NVFP4 layer suite
# against the CPU oracle, test_nvfp4.py and test_mega.py. Then Mega A / B at dsv3_decode and qwen3_30b
# T = 128 (Mega against the staged layer in the same process). On an H200 first: the owed A / B of
# G126 + G128 at dsv3_decode -- C = A without ../g128_code.patch and ../g126_code_at_s60_head.patch.
RUN_NAME=s61r3; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s61
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
h200=0; [[ $gpu == *H200* ]] && h200=1
if [ $h200 = 1 ]; then
  rm -rf .abtree_c && mkdir -p .abtree_c && tar -cf - --exclude='./build*' --exclude='./.abtree*' . | tar -xf - -C .abtree_c
  (cd .abtree_c && patch -s -R -p1 < ../$D/g129_mega_w13_uniform.patch && patch -s -R -p1 < ../$D/g128_code.patch &&
    patch -s -R -p1 < ../$D/g126_code_at_s60_head.patch) || { echo "C: the patches do not reverse"; exit 1; }
  (cd .abtree_c && OUT=$L/C BUILD_DIR=build-c scripts/quick_build.sh dist-moe bench_grouped_gemm) > $L/c_build.txt 2>&1 &
  c=$!
fi
OUT=$L scripts/ab_trees.sh $PWD/$D/g129_mega_w13_uniform.patch \
  "dist-moe bench_grouped_gemm dist_moe_gpu_tests dist_moe_torch dist_moe_native dmoe_launch dist_moe_nvfp4_pipeline_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
[ $h200 = 1 ] && { wait $c || { tail -20 $L/c_build.txt; exit 1; }; }
echo "built at $((SECONDS-T0)) s"
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
if [ $h200 = 1 ]; then
  arm_rounds "h200 staged" 2 "C A" '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench $decode
  arm_rounds "h200 mega" 2 "C A B" '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' dist-moe bench $decode --pipeline mega
  for r in 1 2; do
    for arm in C A; do
      f=$L/h200_gemm_$arm$r.log
      timeout 60 $(arm_dir $arm)/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
      echo "h200 gemm $arm$r: $(bs_picks $f)"
    done
  done
fi
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/suite_nvfp4.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' $L/suite_nvfp4.log | head -3 | tr '\n' ' ')"
[ "$(left)" -gt 150 ] && pytest_log test_nvfp4_mega 100 $PWD/tests/torch/test_nvfp4.py $PWD/tests/torch/test_mega.py
arm_rounds "mega dsv3_decode" 2 "A B" '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' dist-moe bench $decode --pipeline mega
t128="--shape qwen3_30b --tokens 128 --mode infer --format nvfp4 --no-baseline --iters 20 --sustain-ms 50 --pipeline mega"
arm_rounds "mega qwen3 T128" 2 "A B" '^(inference forward|staged layer|BF16 layer) ' dist-moe bench $t128
