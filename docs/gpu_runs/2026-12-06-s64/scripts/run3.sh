#!/usr/bin/env bash
# s64 r3: issue #26's "must show" on HEAD, on whichever card comes (the device notes: an H100 serves
# for timings reported, the baseline rerun in the same run), and G136's A / B (r4's, folded in after
# two failed starts: one machine start for both). Correctness on HEAD: the NVFP4 GPU gtests, the NVFP4
# layer suite against the CPU oracle (quantized rows and h2 bitwise, the oracle and upstream
# tolerances, the graph matrix, padding), test_nvfp4.py / test_prepare.py and the example through
# torch. Performance, our BF16 layer in the same process as each block-scaled one: the decode GEMMs
# against the copy rate (two rounds), the staged NVFP4 decode layer against our BF16 decode (two
# rounds), the MXFP8 decode layer (NVFP4 >= 1.3x it), dsv3_prefill NVFP4 inference (>= 0.9x BF16).
# G136 (perf_history): H = HEAD's bench_quantize, G = HEAD + ../g136_token_row_walk.patch (built in
# .g136 beside HEAD's build): the quantizer GPU tests on G, then the NVFP4 token rows alternated,
# three rounds. Last, with what is left: Mega at dsv3_decode and qwen3_30b T = 128 (issue #28's rows).
RUN_NAME=s64r3; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s64
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
rm -rf .g136 && mkdir -p .g136 $L/G
tar -cf - --exclude='./build*' --exclude='./.abtree*' --exclude='./.g136' . | tar -xf - -C .g136
(cd .g136 && patch -s -p1 < ../$D/g136_token_row_walk.patch) || { echo "the G136 patch does not apply"; exit 2; }
(cd .g136 && OUT=$L/G BUILD_DIR=build-g scripts/quick_build.sh bench_quantize dist_moe_gpu_tests > $L/G/out.txt 2>&1) &
g=$!
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm bench_quantize dist_moe_gpu_tests dmoe_launch \
  dist_moe_nvfp4_pipeline_tests dist_moe_torch dist_moe_native || exit 1
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
nvfp4_suite B 200
BUDGET=$(( SECONDS - T0 + 80 )) torch_tests test_nvfp4 test_prepare 2> /dev/null | grep -v torch_rest
pytest_log example_block_scaled 60 "$PWD/tests/torch/test_examples_run.py" -k block_scaled_inference
gemm_pick_rounds dsv3_decode 2 B --shapes dsv3_decode --ep 1 --iters 10 --routing balanced \
  --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --sustain-ms 100
decode="--shape dsv3_decode --mode infer --no-baseline --iters 10 --sustain-ms 50"
arm_rounds "staged nvfp4 dsv3_decode" 2 B '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench \
  $decode --format nvfp4
arm_rounds "mxfp8 dsv3_decode" 1 B '^(inference forward|BF16 layer) ' dist-moe bench $decode --format mxfp8
ARM_TIMEOUT=90 arm_rounds "nvfp4 dsv3_prefill" 1 B '^(inference forward|BF16 layer) ' dist-moe bench \
  --shape dsv3_prefill --mode infer --format nvfp4 --no-baseline --iters 5 --sustain-ms 100
# G136
wait $g; cat $L/G/out.txt | head -3
if grep -q "build OK" $L/G/out.txt && [ "$(left)" -gt 60 ]; then
  timeout 100 .g136/build-g/tests/dist_moe_gpu_tests --gtest_color=no \
    --gtest_filter='Quantize*:SwigluBackwardQuantize*:Nvfp4ExpandRows*' > $L/gtest_quant_G.log 2>&1
  echo "G quantizer gtests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gtest_quant_G.log | tr '\n' ' ')"
  grep -E '^\[  FAILED|^\[       OK \] QuantizeNvfp4.TokenRows' $L/gtest_quant_G.log | head -8
  rows() { grep -E '^(dsv3_prefill|qwen3_30b) +nvfp4_token_rows ' "$1" | awk '{printf "%s %s ms copy %s %s; ", $1, $3, $4, $5}'; }
  for r in 1 2 3; do
    for arm in H G; do
      [ "$(left)" -lt 40 ] && break 2
      b=build-gpu; [ $arm = G ] && b=.g136/build-g
      f=$L/rows_$arm$r.log
      timeout 40 $b/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --cases nvfp4_token_rows --iters 50 \
        --sustain-ms 100 > $f 2>&1
      echo "token rows $arm$r rc=$?: $(rows $f)"
    done
  done
fi
mega_lines='^(inference forward|staged layer|BF16 layer) '
arm_rounds "mega nvfp4 dsv3_decode" 1 B "$mega_lines" dist-moe bench $decode --format nvfp4 --pipeline mega
arm_rounds "mega nvfp4 qwen3 T128" 1 B "$mega_lines" dist-moe bench --shape qwen3_30b --tokens 128 --mode infer \
  --format nvfp4 --no-baseline --iters 20 --sustain-ms 50 --pipeline mega
