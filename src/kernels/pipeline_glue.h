// Small kernels that glue the BF16 pipeline together on the device, so the host launches one fixed
// sequence whatever the routing: predicated copies (save x / h3 into an activation slot, restore x
// for recompute), predicated expert counts (a GEMM over "no rows" when its stage is skipped),
// the exchange of every rank's received-row count, and the expert-id check.
//
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dist_moe/dtype.h"
#include "dist_moe/device/common/device_address.h"

namespace dist_moe::kernels {

// dst = src (bytes, a multiple of 16) when *predicate matches `when` (nullptr predicate: always).
void copy_if(common::DeviceAddress dst, common::DeviceAddress src, int64_t bytes, const int64_t* predicate, bool when,
             cudaStream_t stream);

// Several small device-to-device copies in one launch (the forward's copy of the routing tables for
// its backward: six arrays, each a few KiB): dst[i] = src[i], bytes[i] a multiple of 4, i < n <=
// kMaxCopies. One launch instead of six copy-engine operations on the critical path.
inline constexpr int kMaxCopies = 8;
struct CopyBatch {
  void* dst[kMaxCopies] = {};
  const void* src[kMaxCopies] = {};
  int64_t bytes[kMaxCopies] = {};
  int n = 0;
  void add(void* d, const void* s, int64_t b);
};
void copy_batch(const CopyBatch& batch, cudaStream_t stream);

// counts_out[e] = (*predicate != 0) == when ? counts_in[e] : 0, for e < n: a grouped GEMM launched
// with counts_out does its work only when the predicate says so (empty experts cost nothing).
void predicated_counts(const int32_t* counts_in, int32_t* counts_out, int n, const int64_t* predicate, bool when,
                       cudaStream_t stream);

// *out = (*predicate != 0) ? if_true : *if_false: a buffer whose place depends on a device decision
// (h3 lives in the activation slot when saved, in the combine window when recomputed).
void select_offset(int64_t* out, const int64_t* predicate, int64_t if_true, const int64_t* if_false,
                   cudaStream_t stream);

// Converts n FP32 values to BF16 (RNE).
void convert_f32_to_bf16(const float* in, void* out_bf16, int64_t n, cudaStream_t stream);

// Stores *value into slot `rank` of every peer's copy of a symmetric int32 [R] array
// (peer_bases[p] = that array's address in peer p's window as seen from this GPU), followed by a
// system-scope release fence; an EP barrier afterwards makes all ranks' values visible.
void publish_to_peers(const int32_t* value, int32_t* const* peer_bases, int rank, int world, cudaStream_t stream);

// Traps with "DistMoE expert ID is outside [-1, num_experts)" (rank, index, id) when an id is out
// of range. ids: [n] int32 or int64.
void validate_expert_ids(const void* ids, DType id_dtype, int64_t n, int64_t num_experts, int rank,
                         cudaStream_t stream);

// One thread spins for `ns` nanoseconds (%globaltimer): a debugging delay that makes this rank late
// at a chosen point of the sequence (DMOE_DEBUG_STAGE_DELAY; docs/pipeline.md, "Ordering checks"),
// to expose ordering bugs between ranks that normal timing hides.
void spin_delay(int64_t ns, cudaStream_t stream);

}  // namespace dist_moe::kernels
