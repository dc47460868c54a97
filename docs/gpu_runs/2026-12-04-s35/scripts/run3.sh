#!/usr/bin/env bash
# s35 r3: the block-scaled GEMMs at dsv3_prefill EP1 (256 local experts: FP8 blockwise on the
# one-stage-shallower fallbacks) against our BF16 GEMMs, interleaved; the FP8-blockwise and MXFP8
# training layers at dsv3_prefill EP1 again (two runs each, alternated) and MXFP8 at mixtral.
O=${OUT:-/tmp/o}; L=/tmp/s35r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target dist-moe bench_grouped_gemm ) > $L/build.log 2>&1
for b in dist-moe bench/bench_grouped_gemm; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 300 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes dsv3_prefill --routing balanced,random \
  --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8,w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 \
  --rounds 3 --sustain-ms 100 > $L/gemm_ep1.log 2>&1
echo "GEMMs EP1 (256 experts) rc=$? at $((SECONDS-T0)) s"
grep -E "^fp8 .*\(pick\)|skipped" $L/gemm_ep1.log | tr -s ' ' | cut -c1-140
layer() {  # shape format [extra]
  timeout 120 build-gpu/dist-moe bench --shape $1 --format $2 --no-baseline --iters 5 --sustain-ms 100 $3 > $L/layer_$1_$2_$SECONDS.log 2>&1
  echo "layer $1 $2 rc=$? at $((SECONDS-T0)) s: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|rror' $(ls -t $L/layer_$1_$2_*.log | head -1) | tr -s ' ' | tr '\n' '|')"
}
for i in 1 2; do layer dsv3_prefill fp8_blockwise; layer dsv3_prefill mxfp8; done
layer mixtral mxfp8
