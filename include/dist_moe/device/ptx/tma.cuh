// TMA (cp.async.bulk.tensor): tile copies between global memory and shared memory described by a
// CUtensorMap built on the host with cuTensorMapEncodeTiled.
//
// A tensor map is read by the "tensormap proxy" from parameter space (a __grid_constant__ kernel
// parameter) or from global memory (a map patched on the device, see tensormap.cuh); the generic
// address of either is what the instructions take. Coordinates are in elements, innermost dimension
// first.
//
// Loads: parts of the box outside the tensor are filled with zeros and still count toward the bytes
// the mbarrier expects. Stores and reductions: elements outside the tensor are not written; each
// copy belongs to the issuing thread's current bulk async-group (commit, then wait on the group
// count), and only that thread can wait for it.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Pulls the descriptor into the TMA unit's cache ahead of the first copy.
DMOE_DEVICE void prefetch_tensormap(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tensor_map) : "memory");
}

// 2D tile load: box at (c0 = inner coordinate, c1 = outer coordinate) into `smem_dst`,
// completion (bytes) reported on the mbarrier at `bar`.
DMOE_DEVICE void tma_load_2d(uint32_t smem_dst, const void* tensor_map, uint32_t bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// Pulls a 2D box of the tensor into L2 (as tma_prefetch_l2_3d).
DMOE_DEVICE void tma_prefetch_l2_2d(const void* tensor_map, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(tensor_map), "r"(c0), "r"(c1)
               : "memory");
}

// Pulls a 3D box of the tensor into L2, nothing into shared memory and nothing to wait for: the
// lines a later copy or reduction will touch leave HBM ahead of it.
DMOE_DEVICE void tma_prefetch_l2_3d(const void* tensor_map, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];" ::"l"(tensor_map), "r"(c0),
               "r"(c1), "r"(c2)
               : "memory");
}

// Contiguous bulk copy (no tensor map): `bytes` (a multiple of 16) from 16-byte aligned global
// `src` to shared `smem_dst`, completion reported on the mbarrier at `bar`.
DMOE_DEVICE void bulk_load_1d(uint32_t smem_dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// The same box delivered to every CTA of the cluster whose bit is set in `cta_mask`: each gets it
// at the same shared-memory offset (`smem_dst`, an address of this CTA) and its completion on the
// mbarrier at the same offset (`bar`). One L2 read feeds them all.
DMOE_DEVICE void tma_load_2d_multicast(uint32_t smem_dst, const void* tensor_map, uint32_t bar, int32_t c0,
                                       int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)
      : "memory");
}

// ---- stores (shared -> global), asynchronous, tracked by bulk async-groups ----------------------
DMOE_DEVICE void tma_store_2d(const void* tensor_map, uint32_t smem_src, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(tensor_map),
               "r"(smem_src), "r"(c0), "r"(c1)
               : "memory");
}

DMOE_DEVICE void tma_store_3d(const void* tensor_map, uint32_t smem_src, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   tensor_map),
               "r"(smem_src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

// global += shared, element-wise in the tensor's type (FP32: one rounding, like acc + old; BF16:
// the staged value was already rounded once).
DMOE_DEVICE void tma_reduce_add_2d(const void* tensor_map, uint32_t smem_src, int32_t c0, int32_t c1) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   tensor_map),
               "r"(smem_src), "r"(c0), "r"(c1)
               : "memory");
}

DMOE_DEVICE void tma_reduce_add_3d(const void* tensor_map, uint32_t smem_src, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
          tensor_map),
      "r"(smem_src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Closes the issuing thread's current bulk async-group.
DMOE_DEVICE void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most kPending of this thread's bulk groups still read their shared-memory source
// (after which that shared memory may be overwritten).
template <int kPending>
DMOE_DEVICE void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Waits until at most kPending of this thread's bulk groups are incomplete (writes performed).
template <int kPending>
DMOE_DEVICE void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
