#!/usr/bin/env bash
# s73 r3: G152 beyond qwen3_30b -- the MXFP8 layer A / B at mixtral and dsv3_prefill with 128 experts (A:
# DMOE_MXFP8_REROUND=1, G151's path; B: default), the FP8-blockwise training suite (its pipeline now also
# serves MXFP8: the scale rule and weight-scale hooks), the MXFP8 suite's two Mega cases (r2's suite reached
# its 140 s timeout after its 18 staged cases), and any torch tests named in TORCH_TESTS.
RUN_NAME=s73r3; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests dist_moe_native \
  dist_moe_mxfp8_pipeline_tests dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
for case in mega_training mega_inference; do
  timeout 70 build-gpu/dmoe_launch -n 1 --timeout 60 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests --filter $case \
    > $L/suite_mxfp8_$case.log 2>&1
  echo "mxfp8 suite $case rc=$? at $((SECONDS-T0)) s: $(grep -E 'PASS case|FAIL case|ALL PASS|FAILED:' $L/suite_mxfp8_$case.log | cut -c1-160 | tr '\n' ' ')"
done
layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 150
env_arm .envA DMOE_MXFP8_REROUND=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^bwd:w13_wgrad|^bwd:w2_wgrad|^BF16 layer forward\+backward"
ARM_TIMEOUT=70 ab_layer_rounds "mxfp8 mixtral" 1 "$lines" --shape mixtral --format mxfp8 --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=90 ab_layer_rounds "mxfp8 dsv3_prefill E128" 1 "$lines" --shape dsv3_prefill --experts 128 --format mxfp8 \
  --no-baseline --iters 3 --sustain-ms 100
for t in ${TORCH_TESTS:-}; do
  [ "$(left)" -gt 50 ] && pytest_log torch_$t $(( $(left) > 90 ? 80 : $(left) - 10 )) "$PWD/tests/torch/test_$t.py"
done
