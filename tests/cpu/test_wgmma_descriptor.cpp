// The shared-memory matrix descriptors the wgmma mainloops build (ptx/wgmma.cuh), checked on the
// host: the field layout, and that advancing the start address in 32-bit arithmetic
// (desc_advance32, the FP8-blockwise FPROP's) gives the same descriptor as the 64-bit advance and as
// a descriptor built at the advanced address, for every 16-byte shared address the GEMM kernels can
// use (227 KiB) and the offsets they add.
#include <gtest/gtest.h>

#include <cstdint>

#include "dist_moe/device/ptx/wgmma.cuh"

namespace ptx = dist_moe::ptx;

TEST(WgmmaDescriptor, FieldLayout) {
  const uint64_t d = ptx::make_smem_desc(0x12340u, 16, 1024);
  EXPECT_EQ(d & 0x3FFFu, 0x12340u >> 4);            // start address >> 4
  EXPECT_EQ((d >> 16) & 0x3FFFu, 1u);               // LBO 16 >> 4
  EXPECT_EQ((d >> 32) & 0x3FFFu, 1024u >> 4);       // SBO 1024 >> 4
  EXPECT_EQ((d >> 49) & 0x7u, 0u);                  // base offset
  EXPECT_EQ(d >> 62, 1u);                           // 128-byte swizzle
  EXPECT_EQ(ptx::make_kmajor_desc(0x400u), ptx::make_smem_desc(0x400u, 16, 1024));
}

TEST(WgmmaDescriptor, Advance32MatchesAdvance64) {
  constexpr uint32_t kSmemLimit = 227 * 1024;  // the opt-in shared memory of an SM90 CTA
  // k32 steps of A and B, slice offsets (64 and 128 rows of 128 bytes), MN-major box steps.
  const uint32_t offsets[] = {0, 32, 64, 96, 2048, 4096, 8192, 16384, 32768, 49152, 98304};
  int checked = 0;
  for (uint32_t addr = 0; addr < kSmemLimit; addr += 16) {
    for (const uint32_t off : offsets) {
      if (addr + off >= kSmemLimit) continue;
      const uint64_t d = ptx::make_kmajor_desc(addr);
      const uint64_t d64 = ptx::desc_advance(d, off);
      ASSERT_EQ(ptx::desc_advance32(d, off), d64) << "addr " << addr << " + " << off;
      ASSERT_EQ(d64, ptx::make_kmajor_desc(addr + off)) << "addr " << addr << " + " << off;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000);
}
