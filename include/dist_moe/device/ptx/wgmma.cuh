// wgmma (sm_90a): warpgroup matrix multiply-accumulate, inputs from shared memory (BF16 k16, and
// E4M3 k32 for the FP8 GEMMs to come), FP32 accumulators in registers.
//
// One instruction computes D[64 x N] (+)= A[64 x kK] * B[kK x N] for the 128 threads of a
// warpgroup (kK = 32 bytes of K: 16 BF16 or 32 E4M3). A and B are described by 64-bit
// shared-memory descriptors (see make_smem_desc below).
//
// Accumulator fragment (PTX ISA "wgmma 64xNx16 D"), for thread t of the warpgroup:
//   warp w = t / 32, lane l = t % 32, register i in [0, N/2):
//   row = 16 * w + l / 4 + 8 * ((i / 2) % 2)
//   col = 8 * (i / 4) + 2 * (l % 4) + i % 2
// so registers 4j..4j+3 hold columns 8j + 2(l%4) + {0,1} of rows r0 and r0 + 8.
//
// Asynchrony: wgmma_fence() before the first wgmma that reads accumulators written by ordinary
// instructions; wgmma_commit() closes a group; wgmma_wait<N>() waits until at most N groups are
// still in flight (after which their smem operands may be overwritten and their accumulators read).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

// ---- shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format") -----------------------
//   bits  0-13  start address >> 4          (byte address & 0x3FFFF)
//   bits 16-29  leading dimension byte offset >> 4   (LBO)
//   bits 32-45  stride dimension byte offset >> 4    (SBO)
//   bits 49-51  base offset (0: every swizzle atom starts on a 1024-byte boundary)
//   bits 62-63  swizzle: 0 none, 1 128B, 2 64B, 3 32B
//
// This library uses only the 128-byte swizzle (TMA CU_TENSOR_MAP_SWIZZLE_128B, boxes whose inner
// extent is exactly 64 BF16 = 128 bytes, stage buffers aligned to 1024 bytes). In PTX terms a
// "row" is 128 bytes of the contiguous dimension and an atom is 8 such rows (1024 bytes) with the
// 16-byte chunks of row r XOR-ed by r % 8 -- exactly the pattern TMA writes.
//
// K-major operand (contraction dimension contiguous; FPROP A and B, DGRAD A):
//   smem tile = R rows (M or N) of 64 K-elements, row r at byte 128 * r.
//   SBO = 1024 (from one 8-row group to the next along M/N); LBO unused for swizzled K-major
//   ("assumed 1"). A k16 step moves 16 elements = 32 bytes inside the 128-byte row: start += 32.
//
// MN-major operand (M or N contiguous; DGRAD B, WGRAD A and B), instruction transpose bit = 1:
//   smem tile = boxes of 64 MN-elements x 64 K-rows (8 KiB each), K-row k of box b at
//   byte 8192 * b + 128 * k.
//   LBO = distance between 64-element MN chunks ("offset from the first swizzle-width rows to the
//   next", PTX ISA table) = bytes per box; SBO = 1024 (from one 8-row K group to the next).
//   A k16 step moves 16 K-rows = 2048 bytes: start += 2048.

DMOE_HOST_DEVICE constexpr uint64_t make_smem_desc(uint32_t smem_byte_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return (static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4)) |
         (static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32) |
         (static_cast<uint64_t>(1) << 62);  // 128-byte swizzle
}

// Descriptor of a K-major, 128B-swizzled tile starting at `smem_byte_addr` (1024-aligned atom).
DMOE_HOST_DEVICE constexpr uint64_t make_kmajor_desc(uint32_t smem_byte_addr) {
  return make_smem_desc(smem_byte_addr, 16, 1024);
}

// Descriptor of an MN-major, 128B-swizzled tile made of boxes `box_bytes` apart.
DMOE_HOST_DEVICE constexpr uint64_t make_mnmajor_desc(uint32_t smem_byte_addr, uint32_t box_bytes) {
  return make_smem_desc(smem_byte_addr, box_bytes, 1024);
}

// Adds a byte offset to the start-address field (the offset keeps the address inside the
// 256 KiB window, so no carry leaves the 14-bit field).
DMOE_HOST_DEVICE constexpr uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }
// The same in 32-bit arithmetic: the start address field (bits 0-13, shared address / 16 < 2^14)
// never carries into the high word, which stays the compile-time constant of make_smem_desc, so
// only the low word needs a register (the FP8-blockwise 128x256 kernels spilled 16-36 bytes less).
DMOE_HOST_DEVICE constexpr uint64_t desc_advance32(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(static_cast<uint32_t>(desc) + (bytes >> 4));
}

// ---- wgmma families by operand type ---------------------------------------------------------------
// The wrappers (CUDA-only part below) are declared here so the tags can name them in host passes.
template <int kN, int kTransA, int kTransB>
struct WgmmaBf16;
template <int kN, int kTransA = 0, int kTransB = 0>
struct WgmmaE4m3;
template <int kN, int kTransA = 0, int kTransB = 0>
struct WgmmaF16Rs;

// What a mainloop needs to know of an operand type: bytes per element, the K of one instruction,
// whether MN-major (transposed) shared-memory operands are allowed, and the instruction per N.
struct WgmmaTypeBf16 {
  static constexpr int kElemBytes = 2;
  static constexpr int kK = 16;
  static constexpr bool kTransposable = true;
  template <int kN, int kTransA, int kTransB>
  using Mma = WgmmaBf16<kN, kTransA, kTransB>;
};

struct WgmmaTypeE4m3 {
  static constexpr int kElemBytes = 1;
  static constexpr int kK = 32;
  static constexpr bool kTransposable = false;
  template <int kN, int kTransA, int kTransB>
  using Mma = WgmmaE4m3<kN, kTransA, kTransB>;
};

// FP16 with A from registers (the NVFP4 GEMMs: both operands dequantized exactly to FP16 by the
// kernel; mainloop_nvfp4_swap_ab.cuh). Only the RS form exists, K-major B.
struct WgmmaTypeF16Rs {
  static constexpr int kElemBytes = 2;
  static constexpr int kK = 16;
  static constexpr bool kTransposable = false;
  template <int kN, int kTransA, int kTransB>
  using Mma = WgmmaF16Rs<kN, kTransA, kTransB>;
};

// ---- accumulator operands, shared by every wgmma family ------------------------------------------
// A thread holds N / 2 FP32 accumulators of an m64 x N fragment. They are the asm operands %0 ..
// %(N/2 - 1) of every wrapper below (outputs come first), so only the operands after them -- the
// descriptors and flags -- differ between families and are numbered per N.
#define DMOE_WGMMA_ACC_8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define DMOE_WGMMA_OUT_8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define DMOE_WGMMA_ACC_16 \
  DMOE_WGMMA_ACC_8 \
  ", %8, %9, %10, %11, %12, %13, %14, %15"
#define DMOE_WGMMA_OUT_16 \
  DMOE_WGMMA_OUT_8, \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define DMOE_WGMMA_ACC_32 \
  DMOE_WGMMA_ACC_16 \
  ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define DMOE_WGMMA_OUT_32 \
  DMOE_WGMMA_OUT_16, \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define DMOE_WGMMA_ACC_64 \
  DMOE_WGMMA_ACC_32 \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
  ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define DMOE_WGMMA_OUT_64 \
  DMOE_WGMMA_OUT_32, \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define DMOE_WGMMA_ACC_128 \
  DMOE_WGMMA_ACC_64 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79" \
  ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95" \
  ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111" \
  ", %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define DMOE_WGMMA_OUT_128 \
  DMOE_WGMMA_OUT_64, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

#if defined(__CUDACC__)

DMOE_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
DMOE_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

template <int kMaxPending>
DMOE_DEVICE void wgmma_wait() {
  static_assert(kMaxPending >= 0 && kMaxPending <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kMaxPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across an asynchronous wgmma: the
// registers are "modified" by an empty asm, so uses after wgmma_wait() see the final values.
template <int kN>
DMOE_DEVICE void wgmma_fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for the A fragments of register-sourced (RS) wgmmas, which read them asynchronously:
// called after the wgmma_wait() that retires their last reader, it keeps them live until then, so
// the compiler gives no other value their registers while a wgmma may still read them.
template <int kN>
DMOE_DEVICE void wgmma_fence_operands(uint32_t (&a)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// ---- instruction families ---------------------------------------------------------------------------
// One wrapper template per operand type, specialized per N; all have the same interface:
//   Wgmma<kN, kTransA, kTransB>::mma(d, desc_a, desc_b, accumulate)
//   D[64 x N] = A[64 x kK] * B[kK x N] + (accumulate ? D : 0)
// and a type tag (WgmmaTypeBf16, WgmmaTypeE4m3, above the CUDA-only part) names the family, its
// element size and K per instruction, so a mainloop picks a family by its operand type alone.

// BF16 x BF16 -> FP32, m64nNk16. kTransA / kTransB: 0 = K-major, 1 = MN-major.
template <int kTransA, int kTransB>
struct WgmmaBf16<256, kTransA, kTransB> {
  static constexpr int kRegs = 128;
  DMOE_DEVICE static void mma(float (&d)[128], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" DMOE_WGMMA_ACC_128 "}, %128, %129, p, 1, 1, %131, %132;\n"
      "}\n"
      : DMOE_WGMMA_OUT_128
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
  }
};

template <int kTransA, int kTransB>
struct WgmmaBf16<128, kTransA, kTransB> {
  static constexpr int kRegs = 64;
  DMOE_DEVICE static void mma(float (&d)[64], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" DMOE_WGMMA_ACC_64 "}, %64, %65, p, 1, 1, %67, %68;\n"
      "}\n"
      : DMOE_WGMMA_OUT_64
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
  }
};

template <int kTransA, int kTransB>
struct WgmmaBf16<64, kTransA, kTransB> {
  static constexpr int kRegs = 32;
  DMOE_DEVICE static void mma(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" DMOE_WGMMA_ACC_32 "}, %32, %33, p, 1, 1, %35, %36;\n"
      "}\n"
      : DMOE_WGMMA_OUT_32
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
  }
};

template <int kTransA, int kTransB>
struct WgmmaBf16<32, kTransA, kTransB> {
  static constexpr int kRegs = 16;
  DMOE_DEVICE static void mma(float (&d)[16], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" DMOE_WGMMA_ACC_16 "}, %16, %17, p, 1, 1, %19, %20;\n"
      "}\n"
      : DMOE_WGMMA_OUT_16
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
  }
};

template <int kTransA, int kTransB>
struct WgmmaBf16<16, kTransA, kTransB> {
  static constexpr int kRegs = 8;
  DMOE_DEVICE static void mma(float (&d)[8], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {" DMOE_WGMMA_ACC_8 "}, %8, %9, p, 1, 1, %11, %12;\n"
      "}\n"
      : DMOE_WGMMA_OUT_8
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
  }
};

// E4M3 x E4M3 -> FP32, m64nNk32 (PTX ISA: 8-bit types have no transpose operands, so both operands
// are K-major and only <N, 0, 0> exists; imm-scale-a/b = 1). The FP8-blockwise GEMMs use N = 64.
template <>
struct WgmmaE4m3<256, 0, 0> {
  static constexpr int kRegs = 128;
  DMOE_DEVICE static void mma(float (&d)[128], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" DMOE_WGMMA_ACC_128 "}, %128, %129, p, 1, 1;\n"
      "}\n"
      : DMOE_WGMMA_OUT_128
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3<128, 0, 0> {
  static constexpr int kRegs = 64;
  DMOE_DEVICE static void mma(float (&d)[64], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" DMOE_WGMMA_ACC_64 "}, %64, %65, p, 1, 1;\n"
      "}\n"
      : DMOE_WGMMA_OUT_64
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3<64, 0, 0> {
  static constexpr int kRegs = 32;
  DMOE_DEVICE static void mma(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" DMOE_WGMMA_ACC_32 "}, %32, %33, p, 1, 1;\n"
      "}\n"
      : DMOE_WGMMA_OUT_32
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3<32, 0, 0> {
  static constexpr int kRegs = 16;
  DMOE_DEVICE static void mma(float (&d)[16], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {" DMOE_WGMMA_ACC_16 "}, %16, %17, p, 1, 1;\n"
      "}\n"
      : DMOE_WGMMA_OUT_16
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3<16, 0, 0> {
  static constexpr int kRegs = 8;
  DMOE_DEVICE static void mma(float (&d)[8], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {" DMOE_WGMMA_ACC_8 "}, %8, %9, p, 1, 1;\n"
      "}\n"
      : DMOE_WGMMA_OUT_8
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
  }
};

// E4M3 x E4M3 -> FP32, m64nNk32 with A from registers (the "RS" form): a[0..3] hold this thread's
// 16 A values -- rows l/4 and l/4 + 8 of its warp's 16, bytes 4 (l % 4) .. + 3 of K [0, 16) and
// [16, 32) (PTX ISA: wgmma register fragment A for 8-bit types; ldmatrix_x4 loads it). B K-major.
template <int kN>
struct WgmmaE4m3Rs;

template <>
struct WgmmaE4m3Rs<64> {
  static constexpr int kRegs = 32;
  DMOE_DEVICE static void mma(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" DMOE_WGMMA_ACC_32 "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n"
      "}\n"
      : DMOE_WGMMA_OUT_32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3Rs<32> {
  static constexpr int kRegs = 16;
  DMOE_DEVICE static void mma(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {" DMOE_WGMMA_ACC_16 "}, {%16, %17, %18, %19}, %20, p, 1, 1;\n"
      "}\n"
      : DMOE_WGMMA_OUT_16
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
  }
};

// FP16 x FP16 -> FP32, m64nNk16 with A from registers: a[0..3] hold this thread's 8 A values as
// FP16 pairs -- a[0] row l/4 of its warp's 16, K {2(l%4), 2(l%4)+1}; a[1] the same K of row l/4 + 8;
// a[2] and a[3] those rows at K + 8 (PTX ISA: wgmma register fragment A for 16-bit types). B K-major.
template <>
struct WgmmaF16Rs<16, 0, 0> {
  static constexpr int kRegs = 8;
  DMOE_DEVICE static void mma(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {" DMOE_WGMMA_ACC_8 "}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n"
      "}\n"
      : DMOE_WGMMA_OUT_8
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaF16Rs<32, 0, 0> {
  static constexpr int kRegs = 16;
  DMOE_DEVICE static void mma(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {" DMOE_WGMMA_ACC_16 "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n"
      "}\n"
      : DMOE_WGMMA_OUT_16
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaF16Rs<128, 0, 0> {
  static constexpr int kRegs = 64;
  DMOE_DEVICE static void mma(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" DMOE_WGMMA_ACC_64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
      "}\n"
      : DMOE_WGMMA_OUT_64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
  }
};

template <>
struct WgmmaF16Rs<64, 0, 0> {
  static constexpr int kRegs = 32;
  DMOE_DEVICE static void mma(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" DMOE_WGMMA_ACC_32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : DMOE_WGMMA_OUT_32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
  }
};

#endif  // __CUDACC__

#undef DMOE_WGMMA_ACC_8
#undef DMOE_WGMMA_ACC_16
#undef DMOE_WGMMA_ACC_32
#undef DMOE_WGMMA_ACC_64
#undef DMOE_WGMMA_ACC_128
#undef DMOE_WGMMA_OUT_8
#undef DMOE_WGMMA_OUT_16
#undef DMOE_WGMMA_OUT_32
#undef DMOE_WGMMA_OUT_64
#undef DMOE_WGMMA_OUT_128

}  // namespace dist_moe::ptx
