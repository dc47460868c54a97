#include "runtime/activation_buffer.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "dist_moe/check.h"
#include "dist_moe/driver_api.h"
#include "platform/device_guard.h"
#include "platform/vmm_prefetch.h"
#include "platform/vmm_range.h"

namespace dist_moe::runtime {
namespace {

// `device` current for the scope, with its primary context initialized: the VMM calls below go
// through the driver API, which needs a current context.
class DriverDeviceScope {
 public:
  explicit DriverDeviceScope(int device) : guard_(device) { DMOE_CUDA_CHECK(cudaFree(nullptr)); }

 private:
  platform::DeviceGuard guard_;
};

CUmemAllocationProp allocation_prop(ActivationBuffer::SectionKind kind, int device, int host_numa) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  if (kind == ActivationBuffer::SectionKind::kDevice) {
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
  } else if (host_numa >= 0) {
    p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    p.location.id = host_numa;
  } else {
    p.location.type = CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = 0;
  }
  return p;
}

// The NUMA node nearest `device` for its pinned host pages, or -1 when the driver does not know it.
int host_numa_node(const DriverApi& d, int device) {
  int node = -1;
  if (d.cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, static_cast<CUdevice>(device)) != CUDA_SUCCESS)
    node = -1;
  return node;
}

bool uses_host_vmm(const MemoryPlan& plan, bool use_vmm) { return use_vmm && plan.host_scratch_bytes > 0; }

constexpr const char* kClaimOwner = "DistMoE VMM-backed activation buffer";

// The plan's resolved VMM sections, low to high, with the guard extending the hot device section
// (the top of the range), and the range that maps them.
struct VmmLayout {
  std::vector<ActivationBuffer::Section> sections;
  platform::VmmRange::Layout range;
};

VmmLayout vmm_layout(const DriverApi& d, const MemoryPlan& plan, int device, int64_t guard_bytes) {
  DMOE_CHECK_ARG(plan.vmm_granularity_bytes.has_value(),
                 "a VMM plan must be resolved with the device's granularity (vmm_allocation_granularity)");
  const int64_t G = *plan.vmm_granularity_bytes;
  const int host_numa = host_numa_node(d, device);  // pinned host pages near the GPU
  using Kind = ActivationBuffer::SectionKind;
  VmmLayout l;
  if (plan.vmm_device_prefix_bytes) l.sections.push_back({Kind::kDevice, 0, plan.vmm_device_prefix_bytes});
  l.sections.push_back({Kind::kHost, plan.vmm_device_prefix_bytes, plan.vmm_host_section_bytes});
  const int64_t guard_mapped = align_up(guard_bytes, G);
  l.sections.push_back({Kind::kDevice, plan.vmm_device_prefix_bytes + plan.vmm_host_section_bytes,
                        plan.vmm_device_scratch_section_bytes + guard_mapped});
  for (const ActivationBuffer::Section& s : l.sections)
    l.range.sections.push_back({allocation_prop(s.kind, device, host_numa), s.offset, s.bytes});
  l.range.bytes = plan.total_virtual_bytes + guard_mapped;
  l.range.alignment = G;
  l.range.device = device;
  return l;
}

}  // namespace

std::unique_ptr<platform::VmmPrefetch> ActivationBuffer::prefetch(const MemoryPlan& plan, bool use_vmm, int device,
                                                                  int64_t guard_bytes) {
  if (!uses_host_vmm(plan, use_vmm)) return nullptr;
  DriverDeviceScope scope(device);
  const DriverApi& d = driver();
  // The claim first, on this thread: a claimed device is refused before anything is mapped.
  platform::DeviceClaim claim(device, kClaimOwner);
  // The mapping thread's driver calls need the device's context current there too.
  auto make_current = [device] {
    DMOE_CUDA_CHECK(cudaSetDevice(device));
    DMOE_CUDA_CHECK(cudaFree(nullptr));
  };
  return std::make_unique<platform::VmmPrefetch>(d, vmm_layout(d, plan, device, guard_bytes).range, std::move(claim),
                                                 make_current);
}

std::unique_ptr<ActivationBuffer> ActivationBuffer::create(const MemoryPlan& plan, bool use_vmm, int device,
                                                           int64_t guard_bytes, platform::VmmPrefetch* prefetch) {
  DriverDeviceScope scope(device);
  std::unique_ptr<ActivationBuffer> b(new ActivationBuffer());
  b->device_ = device;
  b->activation_bytes_ = plan.total_activation_bytes;
  if (!uses_host_vmm(plan, use_vmm)) {
    DMOE_CHECK_ARG(prefetch == nullptr, "a VMM prefetch was started for a plan without host scratch");
    b->bytes_ = plan.total_device_buffer_bytes;
    b->mapped_bytes_ = b->bytes_ + align_up(guard_bytes);
    if (b->mapped_bytes_ > 0) DMOE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b->base_), b->mapped_bytes_));
    b->sections_.push_back({SectionKind::kDevice, 0, b->bytes_});
    return b;
  }

  const DriverApi& d = driver();
  VmmLayout layout = vmm_layout(d, plan, device, guard_bytes);
  b->sections_ = std::move(layout.sections);
  b->bytes_ = plan.total_virtual_bytes;
  b->mapped_bytes_ = layout.range.bytes;
  // The range claims the device (one live VMM buffer per device and process) until it is fully
  // released; on failure it undoes itself (its error names a cleanup that failed too).
  if (prefetch != nullptr) {
    b->range_ = prefetch->take(layout.range);
  } else {
    platform::DeviceClaim claim(device, kClaimOwner);
    b->range_ = std::make_unique<platform::VmmRange>(d, std::move(layout.range), std::move(claim));
  }
  b->base_ = reinterpret_cast<uint8_t*>(b->range_->base());
  b->vmm_ = true;
  return b;
}

int64_t vmm_allocation_granularity(int device) {
  DriverDeviceScope scope(device);
  const DriverApi& d = driver();
  const int host_numa = host_numa_node(d, device);
  size_t g_dev = 0, g_host = 0;
  CUmemAllocationProp pd = allocation_prop(ActivationBuffer::SectionKind::kDevice, device, host_numa);
  CUmemAllocationProp ph = allocation_prop(ActivationBuffer::SectionKind::kHost, device, host_numa);
  DMOE_CU_CHECK(d.cuMemGetAllocationGranularity(&g_dev, &pd, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  DMOE_CU_CHECK(d.cuMemGetAllocationGranularity(&g_host, &ph, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  return static_cast<int64_t>(g_dev > g_host ? g_dev : g_host);  // a multiple of both
}

void ActivationBuffer::release_vmm() {
  range_->release();  // throws keeping what it still holds, and the device claim: a later close() retries
  range_.reset();
  base_ = nullptr;
  vmm_ = false;
}

void ActivationBuffer::close() {
  if (vmm_) {
    DriverDeviceScope scope(device_);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());  // no kernel may still touch the mapping
    release_vmm();
  } else if (base_) {
    DriverDeviceScope scope(device_);
    DMOE_CUDA_CHECK(cudaFree(base_));
    base_ = nullptr;
  }
}

ActivationBuffer::~ActivationBuffer() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist-moe: warning: %s\n", e.what());
  }
}

}  // namespace dist_moe::runtime
