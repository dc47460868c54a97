// Memory and proxy fences.
//
// Hopper has two "proxies" that reach memory by different paths: the generic proxy (ordinary
// ld/st, atomics) and the async proxy (TMA, wgmma operand reads, bulk copies). Ordering between
// them needs an explicit proxy fence in addition to the usual release/acquire.
#pragma once

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones
// (e.g. st.shared of an operand that wgmma reads next, or zeroing rows a TMA wrote).
DMOE_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Same for global memory: generic stores (a gathered row) before a TMA load that reads them.
DMOE_DEVICE void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// Makes mbarrier.init visible to the async proxy (TMA complete_tx) and to the cluster.
DMOE_DEVICE void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// Acquire-release fence at GPU scope (membar.gl).
DMOE_DEVICE void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
