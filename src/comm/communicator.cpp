// Communicator and SymmetricWindow: NCCL communicator (borrowed or owned), ncclDevComm with LSA
// barriers, device timeout budget, symmetric windows (ncclMemAlloc + ncclCommWindowRegister).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/ep_kernels.h"
#include "core/env_knobs.h"
#include "dist_moe/check.h"
#include "dist_moe/comm.h"
#include "dist_moe/nccl_version.h"

namespace dist_moe::comm {
namespace {

constexpr int64_t kDefaultTimeoutMs = 60000;

int64_t resolve_timeout_ms(int64_t requested) {
  if (requested > 0) return requested;
  if (const char* env = core::env_get("DMOE_COMM_TIMEOUT_MS")) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && v > 0) return v;
    std::fprintf(stderr, "dist_moe: ignoring DMOE_COMM_TIMEOUT_MS='%s' (not a positive integer)\n", env);
  }
  return kDefaultTimeoutMs;
}

// Destructors must not throw: report and go on.
void warn_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress)
    std::fprintf(stderr, "dist_moe: %s failed during teardown: %s\n", what, ncclGetErrorString(r));
}
void warn_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "dist_moe: %s failed during teardown: %s\n", what, cudaGetErrorString(e));
}

}  // namespace

// ---- SymmetricWindow --------------------------------------------------------------------------

SymmetricWindow::SymmetricWindow(const Communicator& comm, size_t bytes) : comm_(comm.nccl_comm()) {
  DMOE_CHECK_ARG(bytes > 0, "symmetric window size must be positive");
  bytes_ = (bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
  DMOE_NCCL_CHECK(ncclMemAlloc(&ptr_, bytes_));
  try {
    DMOE_NCCL_CHECK(ncclCommWindowRegister(comm_, ptr_, bytes_, &win_, NCCL_WIN_COLL_SYMMETRIC));
    if (win_ == nullptr)
      detail::fail(ErrorCode::kNccl, "ncclCommWindowRegister returned no window (is NCCL_CUMEM_ENABLE off, or the "
                                     "device API unsupported on this system?)");
    DMOE_CUDA_CHECK(cudaMemset(ptr_, 0, bytes_));
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (...) {
    if (win_ != nullptr) warn_nccl(ncclCommWindowDeregister(comm_, win_), "ncclCommWindowDeregister");
    warn_nccl(ncclMemFree(ptr_), "ncclMemFree");
    throw;
  }
}

SymmetricWindow::~SymmetricWindow() {
  warn_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (win_ != nullptr) warn_nccl(ncclCommWindowDeregister(comm_, win_), "ncclCommWindowDeregister");
  if (ptr_ != nullptr) warn_nccl(ncclMemFree(ptr_), "ncclMemFree");
}

// ---- Communicator -----------------------------------------------------------------------------

ncclUniqueId Communicator::make_unique_id() {
  ncclUniqueId id;
  DMOE_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

std::unique_ptr<Communicator> Communicator::from_nccl_comm(ncclComm_t comm, const CommunicatorOptions& options) {
  DMOE_CHECK_ARG(comm != nullptr, "from_nccl_comm: the NCCL communicator is null");
  return std::unique_ptr<Communicator>(new Communicator(comm, /*owned=*/false, options));
}

std::unique_ptr<Communicator> Communicator::from_unique_id(const ncclUniqueId& id, int rank, int world_size,
                                                           const CommunicatorOptions& options) {
  DMOE_CHECK_ARG(world_size >= 1, "world_size must be positive, got ", world_size);
  DMOE_CHECK_ARG(rank >= 0 && rank < world_size, "rank=", rank, " must be in [0, ", world_size, ")");
  check_nccl_runtime_version();  // before the first NCCL call: an older NCCL fails later and less clearly
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  DMOE_NCCL_CHECK(ncclCommInitRankConfig(&comm, world_size, id, rank, &config));
  try {
    return std::unique_ptr<Communicator>(new Communicator(comm, /*owned=*/true, options));
  } catch (...) {
    warn_nccl(ncclCommDestroy(comm), "ncclCommDestroy");
    throw;
  }
}

std::unique_ptr<Communicator> Communicator::emulated(int rank, int world_size, const CommunicatorOptions& options) {
  DMOE_CHECK_ARG(world_size >= 1 && world_size <= kMaxEpRanks, "world_size must be in [1, ", kMaxEpRanks, "], got ",
                 world_size);
  DMOE_CHECK_ARG(rank >= 0 && rank < world_size, "rank=", rank, " must be in [0, ", world_size, ")");
  std::unique_ptr<Communicator> c = from_unique_id(make_unique_id(), 0, 1, options);
  c->rank_ = rank;
  c->world_ = world_size;
  c->emulated_ = true;
  return c;
}

Communicator::Communicator(ncclComm_t comm, bool owned, const CommunicatorOptions& options)
    : comm_(comm), owned_(owned) {
  DMOE_CHECK_ARG(options.lsa_barrier_count >= 1, "lsa_barrier_count must be at least 1");
  check_nccl_runtime_version();  // a borrowed communicator may come from any NCCL the process loaded
  DMOE_NCCL_CHECK(ncclCommCount(comm_, &world_));
  DMOE_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  int comm_device = -1;
  DMOE_NCCL_CHECK(ncclCommCuDevice(comm_, &comm_device));
  DMOE_CUDA_CHECK(cudaGetDevice(&device_));
  if (comm_device != device_)
    detail::fail(ErrorCode::kInvalidValue, "the current CUDA device (", device_, ") is not the NCCL communicator's device (",
                 comm_device, "): call cudaSetDevice first");
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_));
  int clock_khz = 0;
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_));
  if (clock_khz <= 0) clock_khz = 2000000;  // 2 GHz: an upper bound for Hopper parts
  timeout_ms_ = resolve_timeout_ms(options.timeout_ms);
  timeout_cycles_ = static_cast<uint64_t>(timeout_ms_) * static_cast<uint64_t>(clock_khz);

  // Device communicator: zero-initialized requirements with LSA barriers (NCCL 2.28 has no
  // initializer macro for this struct).
  ncclDevCommRequirements reqs{};
  reqs.lsaBarrierCount = options.lsa_barrier_count;
  lsa_barrier_count_ = options.lsa_barrier_count;
  const ncclResult_t r = ncclDevCommCreate(comm_, &reqs, &dev_comm_);
  if (r != ncclSuccess)
    detail::fail(ErrorCode::kNccl, "ncclDevCommCreate failed: ", ncclGetErrorString(r), " (", ncclGetLastError(comm_),
                 "); the NCCL device API needs symmetric memory (CUDA VMM, NCCL_CUMEM_ENABLE not 0) and P2P between "
                 "all ranks");
  dev_comm_created_ = true;
  try {
    if (dev_comm_.lsaSize != world_ || dev_comm_.lsaRank != rank_)
      detail::fail(ErrorCode::kRuntime, "expert parallelism needs every rank load/store accessible (one NVLink domain): "
                   "LSA team size ", dev_comm_.lsaSize, " (lsa rank ", dev_comm_.lsaRank, ") vs communicator size ",
                   world_, " (rank ", rank_, ")");
    DMOE_CHECK_ARG(world_ <= kMaxEpRanks, "EP size ", world_, " exceeds the supported maximum of ", kMaxEpRanks);
    DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&setup_stream_, cudaStreamNonBlocking));
    DMOE_CUDA_CHECK(cudaMalloc(&setup_buf_, sizeof(int)));
  } catch (...) {
    warn_nccl(ncclDevCommDestroy(comm_, &dev_comm_), "ncclDevCommDestroy");
    if (setup_stream_) warn_cuda(cudaStreamDestroy(setup_stream_), "cudaStreamDestroy");
    if (owned_) warn_nccl(ncclCommDestroy(comm_), "ncclCommDestroy");
    throw;
  }
}

Communicator::~Communicator() {
  warn_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (dev_comm_created_) warn_nccl(ncclDevCommDestroy(comm_, &dev_comm_), "ncclDevCommDestroy");
  if (setup_buf_) warn_cuda(cudaFree(setup_buf_), "cudaFree");
  if (setup_stream_) warn_cuda(cudaStreamDestroy(setup_stream_), "cudaStreamDestroy");
  if (owned_) {
    warn_nccl(ncclCommFinalize(comm_), "ncclCommFinalize");
    warn_nccl(ncclCommDestroy(comm_), "ncclCommDestroy");
  }
}

std::unique_ptr<SymmetricWindow> Communicator::alloc_window(size_t bytes) const {
  return std::make_unique<SymmetricWindow>(*this, bytes);
}

std::vector<uintptr_t> Communicator::peer_bases(const SymmetricWindow& window) const {
  if (emulated_) return std::vector<uintptr_t>(world_, reinterpret_cast<uintptr_t>(window.local_ptr()));
  uintptr_t* d_bases = nullptr;
  DMOE_CUDA_CHECK(cudaMalloc(&d_bases, world_ * sizeof(uintptr_t)));
  std::vector<uintptr_t> h(world_);
  try {
    launch_window_bases(window.handle(), world_, d_bases, setup_stream_);
    DMOE_CUDA_CHECK(cudaMemcpyAsync(h.data(), d_bases, h.size() * sizeof(uintptr_t), cudaMemcpyDeviceToHost,
                                    setup_stream_));
    DMOE_CUDA_CHECK(cudaStreamSynchronize(setup_stream_));
  } catch (...) {
    warn_cuda(cudaFree(d_bases), "cudaFree");
    throw;
  }
  DMOE_CUDA_CHECK(cudaFree(d_bases));
  return h;
}

void Communicator::host_barrier() const {
  DMOE_CUDA_CHECK(cudaMemsetAsync(setup_buf_, 0, sizeof(int), setup_stream_));
  DMOE_NCCL_CHECK(ncclAllReduce(setup_buf_, setup_buf_, 1, ncclInt32, ncclSum, comm_, setup_stream_));
  DMOE_CUDA_CHECK(cudaStreamSynchronize(setup_stream_));
}

void Communicator::nccl_lsa_barrier(cudaStream_t stream, uint32_t index) const {
  DMOE_CHECK_ARG(index < static_cast<uint32_t>(lsa_barrier_count_), "LSA barrier index ", index,
                 " is out of range: the device communicator has ", lsa_barrier_count_);
  comm::launch_nccl_lsa_barrier(dev_comm_, index, timeout_cycles_, rank_, stream);
}

}  // namespace dist_moe::comm
