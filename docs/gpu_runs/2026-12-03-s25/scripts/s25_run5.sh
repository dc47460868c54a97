#!/usr/bin/env bash
# Session 25 run 5: the committed tree, layer benchmarks only (dist-moe and its launcher built alone).
O=${OUT:-/tmp/o}; mkdir -p $O
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $O/build.log 2>&1
cmake --build build-gpu -j 16 --target dist-moe dmoe_launch >> $O/build.log 2>&1 || { tail -20 $O/build.log; exit 1; }
b() { timeout 60 build-gpu/dist-moe bench --shape $1 --format nvfp4 --mode infer --no-baseline --iters 10 --sustain-ms 50; }
for s in dsv3_prefill dsv3_decode dsv3_prefill qwen3_30b; do
  b $s > $O/bench_$s.$RANDOM.log 2>&1
done
for f in $O/bench_*.log; do echo "== $f"; grep -E "fwd:w13  |fwd:w2  |inference forward|BF16 layer" $f | head -6; done
