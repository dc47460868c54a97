#!/usr/bin/env bash
# s61 r2: G128 A/B -- the NVFP4 swap-AB loop's token-box descriptors from a warp-uniform shared memory
# base and stage (G119's NVFP4 part over G126's weight order: 689 -> 622 loop instructions per stage).
# A = this tree without ../g128_nvfp4_uniform_descs.patch (main), B = this tree. B's NVFP4 / Mega GEMM
# gtests; the decode GEMMs at dsv3_decode EP1 (HBM-bound on an H100) and with the weights in L2
# (--ep 128 --tokens 2: issue-bound, the H200's regime), the dsv3_decode NVFP4 layer staged and Mega,
# alternated. On an H200 also C = A without ../g126_code_at_s60_head.patch (before G126, the
# measurement owed since s60).
RUN_NAME=s61r2; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s61
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
arms="A B"
if [[ $gpu == *H200* ]]; then
  arms="C A B"
  rm -rf .abtree_c && mkdir -p .abtree_c && tar -cf - --exclude='./build*' --exclude='./.abtree*' . | tar -xf - -C .abtree_c
  (cd .abtree_c && patch -s -R -p1 < ../$D/g128_nvfp4_uniform_descs.patch && patch -s -R -p1 < ../$D/g126_code_at_s60_head.patch) ||
    { echo "C: the patches do not reverse"; exit 1; }
  (cd .abtree_c && OUT=$L/C BUILD_DIR=build-c scripts/quick_build.sh dist-moe bench_grouped_gemm) > $L/c_build.txt 2>&1 &
  c=$!
fi
OUT=$L scripts/ab_trees.sh $PWD/$D/g128_nvfp4_uniform_descs.patch "dist-moe bench_grouped_gemm dist_moe_gpu_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
[ "$arms" = "C A B" ] && { wait $c || { tail -20 $L/c_build.txt; exit 1; }; }
echo "built $arms at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*' 150
for r in 1 2; do
  for arm in $arms; do
    for ep in 1 128; do
      [ "$(left)" -lt 200 ] && break 3
      extra="--iters 10"; [ $ep = 128 ] && extra="--tokens 2 --iters 50"
      f=$L/gemm_ep${ep}_$arm$r.log
      timeout 60 $(arm_dir $arm)/bench/bench_grouped_gemm --shapes dsv3_decode --ep $ep $extra --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100 > $f 2>&1
      echo "gemm ep$ep $arm$r: $(bs_picks $f)"
    done
  done
done
decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
arm_rounds "nvfp4 staged" 2 "$arms" '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench $decode
arm_rounds "nvfp4 mega" 2 "$arms" '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' dist-moe bench $decode --pipeline mega
