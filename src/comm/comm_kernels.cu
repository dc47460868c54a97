// Small communication kernels: the standalone EP barrier, NCCL's LSA barrier with a timeout, and
// the query of every rank's window base address.
#include "comm/ep_launch_and_copy.cuh"
#include "comm/ep_kernels.h"

namespace dist_moe::comm {
namespace {

__global__ void __launch_bounds__(64) ep_barrier_kernel(const EpDeviceLayout L, int slot, const int64_t* run_if) {
  if (!common::stage_enabled(run_if, true)) return;  // uniform: every rank skips it together
  ep_barrier_cta(L, slot);
}

__global__ void __launch_bounds__(64)
    nccl_lsa_barrier_kernel(const __grid_constant__ ncclDevComm dev_comm, uint32_t index, uint64_t timeout_cycles,
                            int rank) {
  nccl_lsa_barrier_cta(dev_comm, index, WaitContext{timeout_cycles, rank});
}

__global__ void window_bases_kernel(ncclWindow_t win, int world, uintptr_t* out) {
  for (int p = threadIdx.x; p < world; p += blockDim.x) out[p] = reinterpret_cast<uintptr_t>(ncclGetLsaPointer(win, 0, p));
}

}  // namespace

void launch_ep_barrier(const EpDeviceLayout& L, int slot, cudaStream_t stream, const int64_t* run_if) {
  launch_ex(ep_barrier_kernel, dim3(1), dim3(64), 0, stream, false, false, L, slot, run_if);
}

void launch_nccl_lsa_barrier(const ncclDevComm& dev_comm, uint32_t index, uint64_t timeout_cycles, int rank,
                             cudaStream_t stream) {
  launch_ex(nccl_lsa_barrier_kernel, dim3(1), dim3(64), 0, stream, false, false, dev_comm, index, timeout_cycles, rank);
}

void launch_window_bases(ncclWindow_t win, int world, uintptr_t* out, cudaStream_t stream) {
  launch_ex(window_bases_kernel, dim3(1), dim3(64), 0, stream, false, false, win, world, out);
}

}  // namespace dist_moe::comm
