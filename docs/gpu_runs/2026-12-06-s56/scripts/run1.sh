#!/usr/bin/env bash
# s56 r1 (one call): (1) the torch package after session 56's changes (read-only tensors' addresses
# through the storage's const accessor; the COW, RMSNorm-accumulate, RMSNorm-on-Mega and Mega
# training-loop rows) with every other torch test, test_mega's graphed test (fixed in s55) among
# them; then (2a) on an H200: G119's MXFP8 / NVFP4 rest (s53's patch) A/B at dsv3_decode NVFP4, or
# (2b) elsewhere: s55's _dq ILP patch (MXFP8 gtests of _dq, the _dq bench against our BF16 pick).
RUN_NAME=s56r1; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests bench_grouped_gemm dist_moe_native dist_moe_torch dist-moe dmoe_launch || exit 1
echo "built at $((SECONDS-T0)) s"
BUDGET=380 torch_tests test_single_rank test_training_loop test_mxfp8 test_mega
echo "torch done at $((SECONDS-T0)) s"
if [[ $gpu == *H200* ]]; then
  P=docs/gpu_runs/2026-12-05-s53/g119_mxfp8_nvfp4_rest.patch
  patch -s -p1 --forward < $P || { echo "g119 patch does not apply"; exit 1; }
  OUT=$L/g119 scripts/ab_trees.sh $P "dist-moe dmoe_launch" "dist-moe dmoe_launch" || exit 1
  echo "A/B built at $((SECONDS-T0)) s"
  decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
  ab_layer_rounds "nvfp4 mega" 2 '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' $decode --format nvfp4 --pipeline mega
  ab_layer_rounds "nvfp4 staged" 1 '^(inference forward) |^fwd:w(13|2) .*GB' $decode --format nvfp4
  ab_layer_rounds "mxfp8 mega" 1 '^(inference forward|staged layer) |^fwd:mega .*GB' $decode --format mxfp8 --pipeline mega
else
  patch -s -p1 --forward < docs/gpu_runs/2026-12-06-s55/dq_ilp.patch || { echo "dq_ilp.patch does not apply"; exit 1; }
  OUT=$L/dq scripts/quick_build.sh dist_moe_gpu_tests bench_grouped_gemm || exit 1
  echo "dq built at $((SECONDS-T0)) s"
  gtests mxfp8_dq '*Mxfp8*_dq*' 90
  timeout 100 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
    --rounds 2 --sustain-ms 100 --sweep-match _dq --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 \
    > $L/gemm_dq.log 2>&1
  echo "gemm bench rc=$? at $((SECONDS-T0)) s"
  grep -E "^fp8 .*x bf16" $L/gemm_dq.log | sed -E 's/ +/ /g' | head -40
fi
