#!/usr/bin/env bash
# s59 r1: the VMM prefetch (platform::VmmPrefetch: the activation buffer's range mapped on a
# background thread started before the context's communication windows; CPU-tested against a
# scripted driver) on the real driver -- the activation buffer gtests (also s58's mend, not yet
# GPU-run), test_vmm.py (its BF16 row creates prefetched, synchronous and prefetched contexts and
# compares their steps bitwise), test_single_rank.py (every context goes through the restructured
# build), and bench/vmm_prefetch_bench.py (create_context with prefetch on / off, alternated). On an
# H200 also issue #24's quantizer table (not measured on an H200 since s50).
RUN_NAME=s59r1; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
targets="dist_moe_gpu_tests dist_moe_native dist_moe_torch"
[[ $gpu == *H200* ]] && targets="$targets bench_quantize"
OUT=$L scripts/quick_build.sh $targets || exit 1
echo "built at $((SECONDS-T0)) s"
gtests buffers 'ActivationBuffer*:*Planner*' 120
R=$PWD
pytest_log vmm 200 "$R/tests/torch/test_vmm.py"
export PYTHONPATH=$R/python
for shape in dsv3_prefill qwen3_30b; do
  timeout 120 python3 bench/vmm_prefetch_bench.py --shape $shape --rounds 5 > $L/prefetch_$shape.log 2>&1
  echo "prefetch bench $shape rc=$?:"; grep -E "^(dsv3|qwen3)|^\| [a-z]" $L/prefetch_$shape.log | tail -2
done
pytest_log single_rank $(( $(left) > 200 ? 200 : $(left) - 10 )) "$R/tests/torch/test_single_rank.py"
if [[ $gpu == *H200* ]] && [ "$(left)" -gt 150 ]; then
  timeout $(( $(left) - 10 )) build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 \
    --sustain-ms 100 > $L/quantize.log 2>&1
  echo "quantize rc=$?"; grep -iE "of 32|summary|>= 0.85" $L/quantize.log | tail -3
fi
