#!/usr/bin/env bash
# SASS of one CUDA source on this machine, which has no GPU and whose CUDA 13 toolkit ships no
# disassembler: nvcc compiles FILE.cu to an sm_90a cubin with the library's release flags (and
# ptxas -v), and the nvdisasm of Debian's non-free CUDA 11.8 package reads it once its ELF header
# carries the old ABI (EI_ABIVERSION 7, e_flags 0x005a055a: sm_90, virtual sm_90, 64-bit addresses,
# unified texture mode). 11.8 predates a few SM90 opcodes -- QGMMA (E4M3 wgmma) among them -- and
# prints nothing for those: a gap in the addresses, which scripts/sass_loops.py counts.
#
#   scripts/sass_local.sh FILE.cu [OUT_PREFIX]
#       -> OUT_PREFIX.sass (with each instruction's encoding in a comment), OUT_PREFIX.ptxas (the ptxas -v
#          report), OUT_PREFIX.cubin
#          (OUT_PREFIX defaults to /tmp/sass/<FILE's name>)
#   e.g. scripts/sass_local.sh src/gemm/grouped_gemm_sm90_w13.cu /tmp/sass/w13_a
#        scripts/sass_loops.py /tmp/sass/w13_a.sass /tmp/sass/w13_b.sass --kernel Fp8Blockwise
#
# NVDISASM_DIR [~/.cache/dmoe-nvdisasm]: where the 11.8 nvdisasm is kept. The first run fetches the
# package with apt-get download, adding Debian's contrib / non-free components to apt's sources if
# they are missing (root, Debian 12). NVCC [/usr/local/cuda/bin/nvcc].
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,16p "$0"; exit 2; }
src=$1
out=${2:-/tmp/sass/$(basename "$src" .cu)}
mkdir -p "$(dirname "$out")"
dir=${NVDISASM_DIR:-$HOME/.cache/dmoe-nvdisasm}
nvdisasm=$dir/usr/bin/nvdisasm

if [ ! -x "$nvdisasm" ]; then
  mkdir -p "$dir"
  policy=$(apt-cache policy nvidia-cuda-toolkit 2> /dev/null || true)
  if [[ "$policy" != *"Candidate: "[0-9]* ]]; then
    echo "sass_local: adding Debian's contrib and non-free components to apt's sources" >&2
    cat > /etc/apt/sources.list.d/dmoe-nonfree.sources << 'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
  fi
  (cd "$dir" && { apt-get download -qq nvidia-cuda-toolkit > download.log 2>&1 || { cat download.log; exit 1; }; } &&
     dpkg -x nvidia-cuda-toolkit_*.deb . && rm -f nvidia-cuda-toolkit_*.deb download.log)
  [ -x "$nvdisasm" ] || { echo "sass_local: no nvdisasm in Debian's nvidia-cuda-toolkit" >&2; exit 1; }
fi

"${NVCC:-/usr/local/cuda/bin/nvcc}" -Iinclude -Isrc -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a \
  --expt-relaxed-constexpr -lineinfo -std=c++17 -cubin "$src" -o "$out.cubin" -Xptxas -v 2> "$out.ptxas" ||
  { tail -20 "$out.ptxas"; exit 1; }
python3 - "$out.cubin" "$out.old_abi.cubin" << 'EOF'
import struct, sys
elf = bytearray(open(sys.argv[1], "rb").read())
assert elf[:4] == b"\x7fELF" and elf[4] == 2, "a 64-bit ELF"
elf[8] = 7                                    # EI_ABIVERSION: the pre-CUDA-12.8 ABI
struct.pack_into("<I", elf, 0x30, 0x005A055A)  # e_flags in that ABI: sm_90 / virtual sm_90, 64-bit, unified tex
open(sys.argv[2], "wb").write(elf)
EOF
# -hex: each instruction's encoding in a trailing comment, from which sass_loops.py finds the targets of
# branches to instructions this disassembler does not decode (it prints no label for those).
"$nvdisasm" -c -hex "$out.old_abi.cubin" > "$out.sass"
rm -f "$out.old_abi.cubin"
echo "$out.sass ($(grep -c '^_Z' "$out.sass") kernels), $out.ptxas"
