// Publish: copy this rank's routing ids (converted to the window's int16/int32) and x rows into its
// symmetric routing and dispatch windows, and write the routing header {T, epoch}.
//
// A token row is copied once, whatever K. Ids go to routing slot publish_count % 2 (double
// buffering; see ep_layout.h). The last CTA to finish writes the header and advances
// publish_count, so every CTA read the same slot. With validation on, an id outside [-1, E) makes
// the first thread that sees one print "DistMoE expert ID is outside [-1, num_experts)" and trap;
// nothing is read or written out of bounds either way.
#include "comm/ep_launch_and_copy.cuh"
#include "comm/ep_kernels.h"

#include "dist_moe/device/routing/routing_layout.cuh"

namespace dist_moe::comm {
namespace {

template <typename InT, typename IdT>
__global__ void __launch_bounds__(kPublishThreads) publish_kernel(const EpDeviceLayout L, const int4* __restrict__ x,
                                                                  const InT* __restrict__ ids, int num_tokens,
                                                                  int validate) {
  __shared__ uint32_t s_count;
  trace_first(L, kTrPublishStart);
  if (threadIdx.x == 0) s_count = *reinterpret_cast<volatile uint32_t*>(&L.state->publish_count);
  __syncthreads();
  const uint32_t count = s_count;
  const int slot = static_cast<int>(count & 1u);
  const int64_t slot_offset = static_cast<int64_t>(slot) * L.routing_slot_bytes;
  IdT* ids_out = reinterpret_cast<IdT*>(local_ptr(L.routing_win, slot_offset + kRoutingHeaderBytes));

  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;

  // ids [T, K] -> window ids (one element per thread and step).
  const int64_t n_ids = static_cast<int64_t>(num_tokens) * L.top_k;
  for (int64_t i = tid; i < n_ids; i += nthreads) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (validate && (id < -1 || id >= L.num_experts)) {
      report_bad_expert_id(L, i, id);  // the first reporter prints and traps the grid
      continue;
    }
    ids_out[i] = static_cast<IdT>(id);
  }

  // x rows [T, D] -> dispatch window rows 0..T-1 (16-byte vectors, 4 in flight per thread); none
  // when x is null (the rows are in the window already: DispatchOptions::rows_in_window).
  int4* xo = reinterpret_cast<int4*>(local_ptr(L.dispatch_win, 0));
  const int64_t n_vec = x == nullptr ? 0 : static_cast<int64_t>(num_tokens) * (L.row_bytes / 16);
  constexpr int kUnroll = 4;
  for (int64_t base = tid; base < n_vec; base += nthreads * kUnroll) {
    int4 buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * nthreads;
      if (i < n_vec) buf[u] = ld_nc_v4(x + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * nthreads;
      if (i < n_vec) st_v4(xo + i, buf[u]);
    }
  }

  // This call's rank-partials signal counters start at zero (combine_rank_partials.cu, kPartialsSignal): before
  // the arrival (the route's EP barrier) after which peers increment them.
  zero_partial_counters(L, slot, tid, nthreads);

  // The last CTA writes the header and advances the publish counter.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const uint32_t done = atomicAdd(&L.state->publish_done_ctas, 1u);
    if (done == gridDim.x - 1) {
      RoutingHeader* h = reinterpret_cast<RoutingHeader*>(local_ptr(L.routing_win, slot_offset));
      h->num_tokens = num_tokens;
      h->epoch = count + 1u;
      h->magic = kRoutingHeaderMagic;
      h->id_bytes = static_cast<int32_t>(sizeof(IdT));
      L.state->publish_done_ctas = 0u;
      L.state->publish_count = count + 1u;
      __threadfence();
    }
  }
  trace_last(L, kTrPublishEndLast);
}

template <typename InT>
void launch_publish_typed(const EpDeviceLayout& L, const void* x_TD, const void* ids_TK, int num_tokens, bool validate,
                          int num_ctas, cudaStream_t stream) {
  const int4* x = static_cast<const int4*>(x_TD);
  const InT* ids = static_cast<const InT*>(ids_TK);
  const int v = validate ? 1 : 0;
  if (L.id_bytes == 2)
    launch_ex(publish_kernel<InT, int16_t>, dim3(num_ctas), dim3(kPublishThreads), 0, stream, false, false, L, x, ids,
              num_tokens, v);
  else
    launch_ex(publish_kernel<InT, int32_t>, dim3(num_ctas), dim3(kPublishThreads), 0, stream, false, false, L, x, ids,
              num_tokens, v);
}

}  // namespace

void launch_publish(const EpDeviceLayout& L, const void* x_TD, const void* ids_TK, DType ids_dtype, int num_tokens,
                    bool validate_ids, int num_ctas, cudaStream_t stream) {
  if (ids_dtype == DType::kInt64)
    launch_publish_typed<int64_t>(L, x_TD, ids_TK, num_tokens, validate_ids, num_ctas, stream);
  else
    launch_publish_typed<int32_t>(L, x_TD, ids_TK, num_tokens, validate_ids, num_ctas, stream);
}

}  // namespace dist_moe::comm
