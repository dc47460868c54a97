#!/usr/bin/env bash
# s71 r4: G149 as users run it -- the PyTorch package's MXFP8 tests (the autograd op, graphs, make_fx,
# checkpointing, accumulation), the Mega tests (MXFP8 Mega training's backward takes the same WGRADs) and
# the training loop (a 4-block MoE LM trained per format with per-block checkpointing and one-graph steps,
# eval between steps) -- then the MXFP8 layer A / B at the other two issue-#25 shapes: mixtral and
# dsv3_prefill with 128 experts (one EP2 rank's experts) once (A: DMOE_MXFP8_WGRAD_BF16=1, B: default).
RUN_NAME=s71r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
pytest_log torch_mxfp8 150 "$PWD/tests/torch/test_mxfp8.py"
pytest_log torch_mega 90 "$PWD/tests/torch/test_mega.py"
pytest_log torch_training_loop 120 "$PWD/tests/torch/test_training_loop.py"
env_arm .envA DMOE_MXFP8_WGRAD_BF16=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^bwd:w2_wgrad|^bwd:w13_wgrad|^BF16 layer forward\+backward"
ARM_TIMEOUT=70 ab_layer_rounds "mxfp8 mixtral" 1 "$lines" --shape mixtral --format mxfp8 --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=90 ab_layer_rounds "mxfp8 dsv3_prefill E128" 1 "$lines" --shape dsv3_prefill --experts 128 --format mxfp8 \
  --no-baseline --iters 3 --sustain-ms 100
