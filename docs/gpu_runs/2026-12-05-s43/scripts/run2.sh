#!/usr/bin/env bash
# s43 r2 (r1's build kept on the machine): Mega against the staged layer, alternated in each run, with
# each pipeline's stage table (eager): MXFP8 inference at qwen3_30b T = 128 / 512 / 1024, dsv3_decode
# MXFP8 / NVFP4, qwen3_30b T = 128 NVFP4; then the staged pipeline's stage tables at the same shapes.
O=${OUT:-/tmp/o}; L=/tmp/s43r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 DMOE_EXPERIMENTAL_MEGA=1
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
left() { echo $((540 - (SECONDS - T0))); }
( cmake --build build-gpu -j 16 ) > $L/build.log 2>&1 || { echo "build failed"; tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
bench() {  # name pipeline shape format [tokens]
  local f=$L/layer_$1_$2.log tok=()
  [ -n "${5:-}" ] && tok=(--tokens "$5")
  [ "$(left)" -gt 40 ] || { echo "skip $1 $2"; return; }
  DMOE_PRINT_GEMM_CONFIG=1 timeout 90 build-gpu/dist-moe bench --shape "$3" "${tok[@]}" --mode infer --format "$4" --no-baseline --iters 10 \
    --sustain-ms 50 --pipeline $2 > $f 2>&1
  echo "$1 $2 rc=$? at $((SECONDS-T0)) s: $(grep -E '^fwd:' $f | awk '{printf "%s %s; ", $1, $2}')"
  grep -E "^(inference forward|BF16 layer|staged layer)|teardown|error" $f | head -4
  grep -E "grouped_gemm .* -> " $f | sed 's/.*grouped_gemm //' | sort -u | head -4
}
for p in mega staged; do
  bench qwen3_t128_mxfp8 $p qwen3_30b mxfp8 128
  bench qwen3_t512_mxfp8 $p qwen3_30b mxfp8 512
  bench qwen3_t1024_mxfp8 $p qwen3_30b mxfp8 1024
  bench qwen3_t128_nvfp4 $p qwen3_30b nvfp4 128
  bench dsv3_decode_mxfp8 $p dsv3_decode mxfp8
  bench dsv3_decode_nvfp4 $p dsv3_decode nvfp4
done
