#!/usr/bin/env bash
# s27 r2: the block-scaled decode tiles at mid-sized batches (dsv3 dims, T tokens per rank), the
# default pick against the 32-token tile (DMOE_GEMM_EXPERIMENTAL=1), MXFP8 and NVFP4, and the
# default past the decode threshold.
O=${OUT:-/tmp/o}; L=/tmp/s27r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist-moe dmoe_launch >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
one() {  # T format tag [env...]
  local T=$1 f=$2 tag=$3; shift 3
  env "$@" timeout 90 build-gpu/dist-moe bench --shape dsv3_decode --tokens $T --format $f --mode infer --no-baseline \
      --iters 10 --sustain-ms 50 > $L/bench_${f}_T${T}_$tag.log 2>&1
  echo "T=$T $f $tag rc=$?: $(grep -E '^inference forward' $L/bench_${f}_T${T}_$tag.log | awk '{print "layer",$3}') $(grep -E '^BF16 layer' $L/bench_${f}_T${T}_$tag.log | awk '{print "bf16",$4,$5}') $(grep -E '^fwd:w13  |^fwd:w2  ' $L/bench_${f}_T${T}_$tag.log | head -2 | awk '{printf "%s %s ", $1, $2}')"
}
for T in 256 512 1024 2048; do
  for f in mxfp8 nvfp4; do
    one $T $f dflt
    one $T $f x32 DMOE_GEMM_EXPERIMENTAL=1
  done
done
for T in 4096; do for f in mxfp8 nvfp4; do one $T $f dflt; done; done
