#!/usr/bin/env bash
# s59 r2. On an H200: s58's pending run6 first -- G119's NVFP4 part (../../2026-12-06-s58/
# g119_nvfp4_over_s58.patch: the token boxes' descriptors in uniform registers, 801 -> 734 loop
# instructions per stage) A / B on the conversion-bound H200: the NVFP4 decode GEMMs at dsv3_decode
# EP1, then the NVFP4 decode layer, staged and Mega, against our BF16 layer (issue #26's 2.5x). B =
# build-gpu (this tree with the patch), A = .abtree. Then on any GPU: the VMM prefetch's new gtest
# and bench/vmm_prefetch_bench.py (r1's failed on a missing Config argument).
RUN_NAME=s59r2; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
P=docs/gpu_runs/2026-12-06-s58/g119_nvfp4_over_s58.patch
common="dist_moe_gpu_tests dist_moe_native dist_moe_torch"
if [[ $gpu == *H200* ]]; then
  patch -s -p1 --forward < $P || { echo "the patch does not apply"; exit 1; }
  OUT=$L scripts/ab_trees.sh $P "dist-moe bench_grouped_gemm $common" "dist-moe bench_grouped_gemm" ||
    { tail -20 $L/build.log $L/A/build.log; exit 1; }
  echo "built A/B at $((SECONDS-T0)) s"
  for r in 1 2; do
    for side in A B; do
      b=build-gpu; [ $side = A ] && b=.abtree/build-ab
      f=$L/gemm_$side$r.log
      timeout 60 $b/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
      echo "gemm $side$r: $(bs_picks $f)"
    done
  done
  decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
  ab_layer_rounds "nvfp4 staged" 2 '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' $decode
  ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --pipeline mega
else
  OUT=$L scripts/quick_build.sh $common || exit 1
  echo "built at $((SECONDS-T0)) s"
fi
gtests buffers 'ActivationBuffer*' 120
export PYTHONPATH=$PWD/python
for args in "--shape dsv3_prefill" "--shape dsv3_prefill --tokens 16384" "--shape mixtral"; do
  [ "$(left)" -lt 60 ] && break
  f=$L/prefetch_$(echo $args | tr -d ' -').log
  timeout 100 python3 bench/vmm_prefetch_bench.py $args --rounds 5 > $f 2>&1
  echo "prefetch bench $args rc=$?: $(grep -E ' GiB$|^\| [a-z]' $f | tr '\n' ' ')"
done
