#!/usr/bin/env bash
# s35 r1: the training-loop tests (tests/torch/test_training_loop.py: BF16, MXFP8, FP8 blockwise; per-block
# checkpointing, a whole step in one CUDA graph, block-scaled vs BF16 learning) and, for issue #28 (G62's
# open question), the staged inference layers' stage tables at mid-sized batches (dsv3 dims, T per rank).
O=${OUT:-/tmp/o}; L=/tmp/s35r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target dist-moe dist_moe_native dist_moe_torch ) > $L/build.log 2>&1
[ -x build-gpu/dist-moe ] || { echo "build failed"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
PYTHONPATH=$PWD/python timeout 240 python3 -m pytest -q -s tests/torch/test_training_loop.py > $L/torch_loop.log 2>&1
echo "training loop rc=$? at $((SECONDS-T0)) s: $(grep -E 'max rel|passed|failed|Error' $L/torch_loop.log | tail -6 | cut -c1-400)"
for T in 128 512 1024; do for f in mxfp8 nvfp4; do
  timeout 60 build-gpu/dist-moe bench --shape dsv3_decode --tokens $T --mode infer --format $f --no-baseline \
    --iters 10 --sustain-ms 50 > $L/mid_${f}_$T.log 2>&1
  echo "T=$T $f rc=$?: $(grep -E 'inference' $L/mid_${f}_$T.log | tail -2 | tr -s ' ' | tr '\n' '|')"
done; done
