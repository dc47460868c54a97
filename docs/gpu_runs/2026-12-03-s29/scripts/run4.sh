#!/usr/bin/env bash
# s29 r4: r3's ncu did not follow dist-moe bench into its rank process (the launcher's child); here
# one rank runs directly (bench-rank, world size 1). The FP8-blockwise training layer's GEMM kernels
# (second call) and the BF16 layer's + GEMM-only twin's kernels: cycles, clocks, DRAM / L2 bytes.
O=${OUT:-/tmp/o}; L=/tmp/s29r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist-moe >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
M="gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum"
export DMOE_RANK=0 DMOE_WORLD_SIZE=1 DMOE_LOCAL_RANK=0 DMOE_LOCAL_WORLD_SIZE=1
run() {  # tag shape experts tokens regex skip count
  export DMOE_BOOTSTRAP_DIR=$(mktemp -d)
  timeout 200 ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:$5" --launch-skip $6 --launch-count $7 \
    --metrics $M --csv --page raw build-gpu/dist-moe bench-rank --shape $2 --mode train --iters 1 --wgrad accumulate \
    --sustain-ms 0 --format fp8_blockwise --experts $3 --tokens $4 > $L/ncu_$1.csv 2> $L/ncu_$1.err
  echo "ncu $1 rc=$? at $((SECONDS-T0)) s"
}
run qwen3_fp8 qwen3_30b 128 8192 Fp8BlockwiseMainloop 8 8
run qwen3_bf16 qwen3_30b 128 8192 'Sm90Mainloop<' 0 12
run mixtral_fp8 mixtral 8 4096 Fp8BlockwiseMainloop 8 8
run mixtral_bf16 mixtral 8 4096 'Sm90Mainloop<' 0 12
python3 - <<'PY'
import csv, glob, os, re
for f in sorted(glob.glob('/tmp/s29r4/ncu_*.csv')):
    rows = [l for l in open(f) if l.startswith('"')]
    if len(rows) < 3: print(f, 'no rows'); continue
    rd = list(csv.reader(rows)); hdr = rd[0]; ix = {k: hdr.index(k) for k in hdr}
    print(os.path.basename(f))
    for r in rd[2:]:
        g = lambda k: r[ix[k]] if k in ix else '?'
        name = g('Kernel Name'); m = re.search(r'(Sm90\w*Mainloop)<dist_moe::gemm::MainloopConfig<([^>]*)', name)
        w = re.search(r'(PaddedStagingWriter|SwizzledTmaWriter)', name)
        short = ((m.group(1) + ' ' + m.group(2)) if m else name[:60]) + (' ' + w.group(1) if w else '')
        print('  %s\n    grid %-5s ns %-11s cycles %-11s Hz %-18s dramR %-15s dramW %-15s L2 %-16s sm%% %s' % (short[:140], g('launch__grid_size'),
              g('gpu__time_duration.sum'), g('sm__cycles_elapsed.max'), g('sm__cycles_elapsed.avg.per_second'),
              g('dram__bytes_read.sum'), g('dram__bytes_write.sum'), g('lts__t_bytes.sum'), g('sm__throughput.avg.pct_of_peak_sustained_elapsed')))
PY
