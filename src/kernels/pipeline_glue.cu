#include "kernels/pipeline_glue.h"

#include <cuda_bf16.h>

#include <cstdio>

#include "dist_moe/check.h"
#include "dist_moe/device/ptx/special_registers.cuh"

namespace dist_moe::kernels {

using common::DeviceAddress;
using common::resolve;
using common::stage_enabled;

namespace {

__global__ void spin_delay_kernel(int64_t ns) {
  const uint64_t start = ptx::globaltimer_ns();
  while (static_cast<int64_t>(ptx::globaltimer_ns() - start) < ns) {
  }
}

__global__ void copy_if_kernel(DeviceAddress dst, DeviceAddress src, int64_t bytes, const int64_t* predicate,
                               bool when) {
  if (!stage_enabled(predicate, when)) return;
  const int4* s = resolve<const int4>(src);
  int4* d = resolve<int4>(dst);
  const int64_t n = bytes / 16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = s[i];
}

// blockIdx.y picks the copy; 4-byte words, grid-strided over blockIdx.x.
__global__ void copy_batch_kernel(const CopyBatch batch) {
  const int i = static_cast<int>(blockIdx.y);
  const uint32_t* s = static_cast<const uint32_t*>(batch.src[i]);
  uint32_t* d = static_cast<uint32_t*>(batch.dst[i]);
  const int64_t n = batch.bytes[i] / 4;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x)
    d[j] = s[j];
}

__global__ void predicated_counts_kernel(const int32_t* in, int32_t* out, int n, const int64_t* predicate,
                                         bool when) {
  const bool on = stage_enabled(predicate, when);
  for (int e = threadIdx.x; e < n; e += blockDim.x) out[e] = on ? in[e] : 0;
}

__global__ void publish_to_peers_kernel(const int32_t* value, int32_t* const* peer_bases, int rank, int world) {
  const int p = threadIdx.x;
  if (p < world) {
    volatile int32_t* dst = peer_bases[p] + rank;
    *dst = *value;
  }
  __threadfence_system();
}

__global__ void select_offset_kernel(int64_t* out, const int64_t* predicate, int64_t if_true,
                                     const int64_t* if_false) {
  *out = *predicate != 0 ? if_true : *if_false;
}

__global__ void convert_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

template <typename Id>
__global__ void validate_ids_kernel(const Id* ids, int64_t n, int64_t num_experts, int rank) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    if (id < -1 || id >= num_experts) {
      printf("DistMoE expert ID is outside [-1, num_experts): rank %d, route %lld has id %lld, num_experts %lld\n",
             rank, static_cast<long long>(i), static_cast<long long>(id), static_cast<long long>(num_experts));
      __trap();
    }
  }
}

int blocks_for(int64_t items, int threads) {
  const int64_t b = (items + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > 1024 ? 1024 : b));
}

}  // namespace

void copy_if(DeviceAddress dst, DeviceAddress src, int64_t bytes, const int64_t* predicate, bool when,
             cudaStream_t stream) {
  DMOE_CHECK_ARG(bytes >= 0 && bytes % 16 == 0, "copy_if needs a multiple of 16 bytes, got ", bytes);
  if (bytes == 0) return;
  copy_if_kernel<<<blocks_for(bytes / 16, 256), 256, 0, stream>>>(dst, src, bytes, predicate, when);
  DMOE_CUDA_CHECK_LAUNCH();
}

void CopyBatch::add(void* d, const void* s, int64_t b) {
  DMOE_CHECK_ARG(n < kMaxCopies, "CopyBatch holds at most ", kMaxCopies, " copies");
  DMOE_CHECK_ARG(b >= 0 && b % 4 == 0 && (b == 0 || (d != nullptr && s != nullptr)),
                 "CopyBatch copies whole 4-byte words between non-null buffers, got ", b, " bytes");
  dst[n] = d;
  src[n] = s;
  bytes[n] = b;
  ++n;
}

void copy_batch(const CopyBatch& batch, cudaStream_t stream) {
  if (batch.n == 0) return;
  int64_t largest = 0;
  for (int i = 0; i < batch.n; ++i) largest = batch.bytes[i] > largest ? batch.bytes[i] : largest;
  if (largest == 0) return;
  const dim3 grid(static_cast<unsigned>(blocks_for(largest / 4, 256)), static_cast<unsigned>(batch.n));
  copy_batch_kernel<<<grid, 256, 0, stream>>>(batch);
  DMOE_CUDA_CHECK_LAUNCH();
}

void predicated_counts(const int32_t* counts_in, int32_t* counts_out, int n, const int64_t* predicate, bool when,
                       cudaStream_t stream) {
  predicated_counts_kernel<<<1, 256, 0, stream>>>(counts_in, counts_out, n, predicate, when);
  DMOE_CUDA_CHECK_LAUNCH();
}

void select_offset(int64_t* out, const int64_t* predicate, int64_t if_true, const int64_t* if_false,
                   cudaStream_t stream) {
  select_offset_kernel<<<1, 1, 0, stream>>>(out, predicate, if_true, if_false);
  DMOE_CUDA_CHECK_LAUNCH();
}

void convert_f32_to_bf16(const float* in, void* out_bf16, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out_bf16), n);
  DMOE_CUDA_CHECK_LAUNCH();
}

void publish_to_peers(const int32_t* value, int32_t* const* peer_bases, int rank, int world, cudaStream_t stream) {
  DMOE_CHECK_ARG(world >= 1 && world <= 1024, "EP size must be in [1, 1024], got ", world);
  publish_to_peers_kernel<<<1, world, 0, stream>>>(value, peer_bases, rank, world);
  DMOE_CUDA_CHECK_LAUNCH();
}

void validate_expert_ids(const void* ids, DType id_dtype, int64_t n, int64_t num_experts, int rank,
                         cudaStream_t stream) {
  if (n == 0) return;
  if (id_dtype == DType::kInt64)
    validate_ids_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(static_cast<const int64_t*>(ids), n, num_experts, rank);
  else
    validate_ids_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(static_cast<const int32_t*>(ids), n, num_experts, rank);
  DMOE_CUDA_CHECK_LAUNCH();
}

void spin_delay(int64_t ns, cudaStream_t stream) {
  spin_delay_kernel<<<1, 1, 0, stream>>>(ns);
  DMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dist_moe::kernels
