#!/usr/bin/env bash
# Prepared in session 26 for the next session's first call: `dist-moe bench --tokens T` on the GPU
# (130e5fe, not yet run there) and the staged inference layers at the mid-sized batches issue #28's
# Mega targets (T = 128 .. 1024 per rank, dsv3 dims): stage tables for MXFP8 and NVFP4 against BF16.
O=${OUT:-/tmp/o}; L=/tmp/s27r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist-moe dmoe_launch >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
for T in 128 256 512 1024; do
  for f in mxfp8 nvfp4; do
    timeout 90 build-gpu/dist-moe bench --shape dsv3_decode --tokens $T --format $f --mode infer --no-baseline \
      --iters 10 --sustain-ms 50 > $L/bench_${f}_T$T.log 2>&1
    echo "T=$T $f rc=$?: $(grep -E '^inference forward' $L/bench_${f}_T$T.log | awk '{print "layer",$3}') $(grep -E '^BF16 layer' $L/bench_${f}_T$T.log | awk '{print "bf16",$4,$5}') $(grep -E '^fwd:w13  |^fwd:w2  ' $L/bench_${f}_T$T.log | head -2 | awk '{printf "%s %s ", $1, $2}')"
  done
done
