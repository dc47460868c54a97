#!/usr/bin/env bash
# s29 r6: (1) ncu of the FP8-blockwise and BF16 W13 FPROP 128x256 kernels at qwen3_30b (r5's regex
# missed: the demangled names print "(int)128"); (2) the preheat protocols on the remaining shapes:
# is 100 ms of self load the steady state (1000 ms), dsv3_prefill with 128 experts, MXFP8 at
# mixtral, NVFP4 decode (memory-bound).
O=${OUT:-/tmp/o}; L=/tmp/s29r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
K='Mainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, \(int\)128, \(int\)256, \(int\)4, \(dist_moe::gemm::ConsumerSchedule\)0, \(dist_moe::gemm::WeightSplit\)1, \(int\)1'
OUT=$L/ncu NCU_SHAPE=qwen3_30b NCU_OPS=w13_fprop_fp8 NCU_KERNELS="fp8w13=Sm90Fp8Blockwise$K;bf16w13=Sm90$K" \
  DMOE_STAGES="build ncu" scripts/gpu_check.sh > $L/chk.log 2>&1
echo "gpu_check rc=$? at $((SECONDS-T0)) s"; grep -E "^ncu|Duration|Issued Ipc|Warp Cycles Per Issued|stalled" $L/ncu/summary.txt | head -24
B() {  # tag, then dist-moe bench arguments
  local tag=$1; shift
  timeout 200 build-gpu/dist-moe bench --no-baseline "$@" > $L/layer_$tag.log 2>&1
  echo "$tag rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward\+backward|^inference|BF16 layer (forward\+backward|inference)|^BF16 layer forward ' $L/layer_$tag.log | tr -s ' ' | tr '\n' '|')"
}
B qwen3_fp8bw_self1000 --shape qwen3_30b --format fp8_blockwise --iters 5 --sustain-ms 1000 --preheat self
B mixtral_fp8bw_self1000 --shape mixtral --format fp8_blockwise --iters 5 --sustain-ms 1000 --preheat self
B dsv3_fp8bw_gemm --shape dsv3_prefill --experts 128 --format fp8_blockwise --iters 5 --sustain-ms 100 --preheat gemm
B dsv3_fp8bw_self --shape dsv3_prefill --experts 128 --format fp8_blockwise --iters 5 --sustain-ms 100 --preheat self
B dsv3_mxfp8_self --shape dsv3_prefill --experts 128 --format mxfp8 --iters 5 --sustain-ms 100 --preheat self
B mixtral_mxfp8_gemm --shape mixtral --format mxfp8 --iters 5 --sustain-ms 100 --preheat gemm
B mixtral_mxfp8_self --shape mixtral --format mxfp8 --iters 5 --sustain-ms 100 --preheat self
B decode_nvfp4_gemm --shape dsv3_decode --mode infer --format nvfp4 --iters 10 --sustain-ms 100 --preheat gemm
B decode_nvfp4_self --shape dsv3_decode --mode infer --format nvfp4 --iters 10 --sustain-ms 100 --preheat self
