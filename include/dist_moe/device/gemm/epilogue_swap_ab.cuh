// Epilogues of the swap-AB (decode) FPROP: the accumulator tile is out^T -- rows are weight rows
// (output features), columns are tokens -- so the staging buffer transposes it: staging row c
// holds token c's 64 output features of one warpgroup block, stored as one 128-byte row segment.
//
// Fragment (mainloop.cuh): block b of warpgroup w covers weight rows tile_row(w, b) + [0, 64);
// register 4j + i is weight row 16 q + l/4 + 8 (i/2), token 8j + 2 (l%4) + i%2 (q = warp, l = lane).
//
// Store epilogue: out[token, feature] = BF16(acc * row_scale[token]), through the scatter table
// when set. SwiGLU epilogue (split weights: block 0 = gate rows, block 1 = the matching up rows):
// h1 (optional) and h2 = SwiGLU(BF16 gate, BF16 up), numerics as epilogue_swiglu.cuh.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/epilogue_swiglu.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"
#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"

namespace dist_moe::gemm {

template <class Mainloop>
struct SwapABStaging {
  static_assert(Mainloop::kKind == GemmKind::kFpropSwapAB, "swap-AB mainloop");
  static constexpr int kTokens = Mainloop::kBlockN;
  static constexpr int kStride = 144;  // 128 bytes of BF16 features + 16 bytes of padding
  // Tokens staged at a time: the whole tile, or 64 (NVFP4's 128-token tiles stage in two passes).
  static constexpr int kChunk = kTokens < 64 ? kTokens : 64;
  static_assert(kTokens % 16 == 0 && kTokens % kChunk == 0 && kChunk * kStride <= PaddedStagingWriter::kBytesPerWg,
                "token chunk fits the staging buffer");

#if defined(__CUDACC__)
  // Writes tokens [kChunk h, kChunk (h + 1)) of one m64 x kTokens fragment, transposed, as BF16.
  template <int kN>
  DMOE_DEVICE static void stage(uint32_t staging, const float (&acc)[kN], int h) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;  // weight row (+8 for i >= 2)
    const int tok = 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kN / 4; ++j) {
      if (j / (kChunk / 8) != h) continue;  // (compile-time after unrolling both loops)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = 8 * j + tok + (i % 2) - kChunk * h;
        const int r = row + 8 * (i / 2);
        ptx::st_shared_b16(staging + c * kStride + r * 2, numeric::float_to_bf16(acc[4 * j + i]).bits);
      }
    }
  }

  // Stores the staged chunk h: thread t writes 16-byte segment t % 8 of its token rows 16 p + t / 8.
  DMOE_DEVICE static void store(uint32_t staging, char* const (&token_ptr)[kTokens / 16], int col0, int cols_valid,
                                int h) {
    const int t = static_cast<int>(threadIdx.x % 128);
    const int seg = t % 8;
    const int col = col0 + seg * 8;
    if (col >= cols_valid) return;
#pragma unroll
    for (int p = 0; p < kChunk / 16; ++p) {
      char* const row = token_ptr[h * (kChunk / 16) + p];
      if (row == nullptr) continue;
      const uint4 v = ptx::ld_shared_v4(staging + (16 * p + t / 8) * kStride + seg * 16);
      ptx::st_global_v4(row + static_cast<int64_t>(col) * 2, v);
    }
  }

  template <int kN>
  DMOE_DEVICE static void write(uint32_t staging, uint32_t bar, const float (&acc)[kN],
                                char* const (&token_ptr)[kTokens / 16], int col0, int cols_valid) {
#pragma unroll
    for (int h = 0; h < kTokens / kChunk; ++h) {
      ptx::named_barrier_sync(bar, 128);
      stage(staging, acc, h);
      ptx::named_barrier_sync(bar, 128);
      store(staging, token_ptr, col0, cols_valid, h);
    }
  }

  // NVFP4 (EpilogueParams::expert_scale_inv set): acc = fl(fl(acc * acc_scale * token_scale_inv)
  // * expert_scale_inv[e]) in place, upstream's order (acc_scale, a power of two, is exact). The
  // token scales are read from L2 (ld.global.cg): in the Mega kernel other SMs write them during the
  // launch (mega.cuh), and a line this SM read earlier could be stale in its L1. The factors are
  // loaded apart from their use, so that kernels with the registers can load them before the k
  // loop (kEarlyLoads: their latency under the loop instead of at the epilogue's start, G131).
  template <int kN>
  struct Nvfp4Factors {
    float token[kN / 4][2];  // this thread's token columns 8 j + 2 (lane % 4) + h
    float expert;
  };
  template <int kN>
  DMOE_DEVICE static Nvfp4Factors<kN> load_nvfp4_factors(const EpilogueParams& p, const WorkTile& t) {
    Nvfp4Factors<kN> f{};
    if (p.expert_scale_inv == nullptr) return f;
    f.expert = p.expert_scale_inv[t.expert];
#pragma unroll
    for (int j = 0; j < kN / 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) f.token[j][h] = nvfp4_token_factor(p, t, j, h);
    return f;
  }
  // The same, each token's factor loaded where it is used (the plain path: at 128 tokens a struct
  // of the 32 factors costs the epilogue registers).
  template <int kBlocks, int kN>
  DMOE_DEVICE static void apply_nvfp4_scales(const EpilogueParams& p, const WorkTile& t, float (&acc)[kBlocks][kN]) {
    if (p.expert_scale_inv == nullptr) return;
    const float expert = p.expert_scale_inv[t.expert];
#pragma unroll
    for (int j = 0; j < kN / 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) scale_nvfp4_column(p, acc, j, h, nvfp4_token_factor(p, t, j, h), expert);
  }
  template <int kBlocks, int kN>
  DMOE_DEVICE static void apply_nvfp4_factors(const EpilogueParams& p, const Nvfp4Factors<kN>& f,
                                              float (&acc)[kBlocks][kN]) {
    if (p.expert_scale_inv == nullptr) return;
#pragma unroll
    for (int j = 0; j < kN / 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) scale_nvfp4_column(p, acc, j, h, f.token[j][h], f.expert);
  }
  // This thread's token column j, half h (8 j + 2 (lane % 4) + h): its token_scale_inv, 0 past the
  // expert (never stored).
  DMOE_DEVICE static float nvfp4_token_factor(const EpilogueParams& p, const WorkTile& t, int j, int h) {
    const int c = first_token(t) + 8 * j + static_cast<int>(2 * (threadIdx.x % 4)) + h;
    return c < t.num_rows ? __ldcg(p.token_scale_inv + (static_cast<int64_t>(t.row_begin) + c) * p.token_scale_stride)
                          : 0.0f;
  }
  // Column (j, h) of every block: its two rows (registers 4j + h and 4j + 2 + h) times the factors.
  template <int kBlocks, int kN>
  DMOE_DEVICE static void scale_nvfp4_column(const EpilogueParams& p, float (&acc)[kBlocks][kN], int j, int h,
                                             float token, float expert) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float& v = acc[b][4 * j + 2 * r + h];
        v = (v * p.acc_scale * token) * expert;
      }
  }

  // First token (counted from the expert's first row) of the tile's column `c` range.
  DMOE_DEVICE static int first_token(const WorkTile& t) { return t.n_block * kTokens; }

  // Row pointers of the tokens this thread stores; nullptr past the expert's end or for a
  // scatter row with no destination.
  DMOE_DEVICE static void token_rows(const WorkTile& t, void* base, int64_t ld_bytes, void* const* scatter,
                                     char* (&token_ptr)[kTokens / 16]) {
    const int tid = static_cast<int>(threadIdx.x % 128);
#pragma unroll
    for (int p = 0; p < kTokens / 16; ++p) {
      const int c = first_token(t) + 16 * p + tid / 8;
      token_ptr[p] = nullptr;
      if (c < t.num_rows) {
        const int64_t row = static_cast<int64_t>(t.row_begin) + c;
        token_ptr[p] = scatter != nullptr ? static_cast<char*>(scatter[row]) : static_cast<char*>(base) + row * ld_bytes;
      }
    }
  }
#endif  // __CUDACC__
};

template <class Mainloop>
struct SwapABStoreEpilogue {
  using Staging = SwapABStaging<Mainloop>;
  using Writer = PaddedStagingWriter;
  static_assert(!Mainloop::kSplit, "plain store");
  static constexpr bool kClipStats = false;
  static constexpr bool kPrefetchL2 = false;  // (kernel.cuh: operands pulled into L2 ahead of the epilogue)
  static constexpr int kOutBytes = 2;
  static constexpr bool kEarlyLoads = Mainloop::kScalesInStage;  // (kernel.cuh; mainloop.cuh)
  using Early = typename Staging::template Nvfp4Factors<Mainloop::kAccPerMma>;

#if defined(__CUDACC__)
  DMOE_DEVICE static Early load_early(const EpilogueParams& p, const WorkTile& t) {
    return Staging::template load_nvfp4_factors<Mainloop::kAccPerMma>(p, t);
  }
  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, Writer& w,
                                ClipCounts& /*unused*/) {
    Staging::apply_nvfp4_scales(p, t, acc);
    store_scaled(p, ops, t, acc, wg, w);
  }
  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, Writer& w,
                                ClipCounts& /*unused*/, const Early& early) {
    Staging::apply_nvfp4_factors(p, early, acc);
    store_scaled(p, ops, t, acc, wg, w);
  }

 private:
  // The store after the NVFP4 factors (if any) are in acc.
  DMOE_DEVICE static void store_scaled(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                       float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, Writer& w) {
    constexpr int kN = Mainloop::kAccPerMma;
    const uint32_t staging = w.buf, bar = w.bar;
    char* token_ptr[Staging::kTokens / 16];
    Staging::token_rows(t, ops.base[kMapOut], p.ld_out * 2, p.scatter_rows, token_ptr);
    if (p.row_scale != nullptr) {  // acc * row_scale[token], one rounding to BF16 after it
      const int tok = static_cast<int>(2 * (threadIdx.x % 4));
#pragma unroll
      for (int j = 0; j < kN / 4; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int c = Staging::first_token(t) + 8 * j + tok + h;
          const float scale = c < t.num_rows ? p.row_scale[t.row_begin + c] : 1.0f;
#pragma unroll
          for (int b = 0; b < Mainloop::kMmaPerWg; ++b) {
            acc[b][4 * j + h] *= scale;
            acc[b][4 * j + 2 + h] *= scale;
          }
        }
    }
#pragma unroll
    for (int b = 0; b < Mainloop::kMmaPerWg; ++b) {
      const int col0 = t.m_block * Mainloop::kBlockM + Mainloop::tile_row(wg, b);
      Staging::write(staging, bar, acc[b], token_ptr, col0, p.out_cols);
    }
  }
#endif  // __CUDACC__
};

template <class Mainloop>
struct SwapABSwigluEpilogue {
  using Staging = SwapABStaging<Mainloop>;
  using Writer = PaddedStagingWriter;
  static_assert(Mainloop::kSplit && Mainloop::kMmaPerWg == 2, "block 0 = gate rows, block 1 = up rows");
  static constexpr bool kClipStats = true;
  static constexpr bool kPrefetchL2 = false;
  static constexpr int kOutBytes = 2;
  static constexpr bool kEarlyLoads = Mainloop::kScalesInStage;  // (kernel.cuh; mainloop.cuh)
  using Early = typename Staging::template Nvfp4Factors<Mainloop::kAccPerMma>;

#if defined(__CUDACC__)
  DMOE_DEVICE static Early load_early(const EpilogueParams& p, const WorkTile& t) {
    return Staging::template load_nvfp4_factors<Mainloop::kAccPerMma>(p, t);
  }
  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[2][Mainloop::kAccPerMma], int wg, Writer& w, ClipCounts& counts) {
    Staging::apply_nvfp4_scales(p, t, acc);
    store_scaled(p, ops, t, acc, wg, w, counts);
  }
  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[2][Mainloop::kAccPerMma], int wg, Writer& w, ClipCounts& counts,
                                const Early& early) {
    Staging::apply_nvfp4_factors(p, early, acc);
    store_scaled(p, ops, t, acc, wg, w, counts);
  }

 private:
  // h1 (optional) and h2 after the NVFP4 factors (if any) are in acc.
  DMOE_DEVICE static void store_scaled(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                       float (&acc)[2][Mainloop::kAccPerMma], int wg, Writer& w, ClipCounts& counts) {
    constexpr int kN = Mainloop::kAccPerMma;
    const uint32_t staging = w.buf, bar = w.bar;
    char* const h1 = ops.base[kMapH1];
    char* const h2 = ops.base[kMapH2];
    const int col0 = t.m_block * (Mainloop::kBlockM / 2) + 64 * wg;  // gate (= h2) feature of row 0
    char* token_ptr[Staging::kTokens / 16];
    if (h1 != nullptr) {
      Staging::token_rows(t, h1, 2 * static_cast<int64_t>(p.f) * 2, nullptr, token_ptr);
      Staging::write(staging, bar, acc[0], token_ptr, col0, 2 * p.f);
      Staging::write(staging, bar, acc[1], token_ptr, p.f + col0, 2 * p.f);
    }
    const int tok = static_cast<int>(2 * (threadIdx.x % 4));
    const int32_t stat_rows = clip_stat_rows(p, t);
    with_swiglu_flavour(p, [&](auto clamped, auto stats) {
      constexpr bool kClamped = decltype(clamped)::value, kStats = decltype(stats)::value;
#pragma unroll
      for (int j = 0; j < kN / 4; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = Staging::first_token(t) + 8 * j + tok + (i % 2);
          acc[0][4 * j + i] =
              swiglu_element<kClamped, kStats>(acc[0][4 * j + i], acc[1][4 * j + i], p, c < stat_rows, counts);
        }
      }
    });
    Staging::token_rows(t, h2, static_cast<int64_t>(p.f) * 2, nullptr, token_ptr);
    Staging::write(staging, bar, acc[0], token_ptr, col0, p.f);
  }
#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
