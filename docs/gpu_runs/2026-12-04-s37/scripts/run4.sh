#!/usr/bin/env bash
# s37 r4: the NVFP4 decode GEMM's SASS (the swap-AB mainloop's descriptor moves, G61's open point):
# build the decode kernels' object only and keep the NVFP4 functions' SASS.
O=${OUT:-/tmp/o}; L=/tmp/s37r4; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
OBJ=CMakeFiles/dist_moe_gemm.dir/src/gemm/grouped_gemm_sm90_decode.cu.o
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && ninja -C build-gpu $OBJ ) > $L/build.log 2>&1
[ -f build-gpu/$OBJ ] || { echo "missing object"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
cuobjdump -sass build-gpu/$OBJ > $L/all.sass 2>&1
echo "sass $(wc -l < $L/all.sass) lines"
awk '/Function :/{keep = ($0 ~ /Nvfp4/)} keep' $L/all.sass > $L/nvfp4.sass
grep "Function :" $L/nvfp4.sass | cut -c1-220
for f in $(grep -o "Function : [^ ]*" $L/nvfp4.sass | awk '{print $3}'); do
  awk -v f="$f" '/Function :/{keep = (index($0, f) > 0)} keep' $L/nvfp4.sass > $L/one.sass
  echo "$(echo $f | cut -c1-60)...: $(grep -c 'HGMMA' $L/one.sass) HGMMA, $(grep -c 'R2UR' $L/one.sass) R2UR, $(grep -c 'PRMT' $L/one.sass) PRMT, $(grep -cE '^\s+/\*[0-9a-f]+\*/' $L/one.sass) instr"
done
rm -f $L/all.sass $L/one.sass
