// A CUDA VMM virtual range: sections of device or pinned host memory mapped back to back behind one
// reserved address range, with its release kept exactly as far as it got.
//
// Only the driver entry points it is given are called (DriverApi: the process's, or a test's), so
// the mapping and every failure path of its release run without a GPU (tests/cpu/test_vmm_range.cpp).
// Construction creates every section's handle, maps them in order and grants one device read/write
// on the whole range; a failure undoes what was done (unmaps in reverse, releases the handles in
// reverse, frees the range) and throws the first error, with a failed cleanup appended to it.
// release() unmaps in reverse, releases the handles of unmapped sections, and frees the range once
// nothing is mapped; whatever fails stays held, named in the error, and a later release() retries it.
//
// A range may hold a claim of its device for its owner (upstream's one live VMM-backed activation
// buffer per device and process; DeviceClaim): a second claim of that device is refused before any
// driver call, and the range gives its claim back only once everything is released -- a failed
// release keeps it until a retry finishes, and memory left held by a failed cleanup keeps it for the
// life of the process.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist_moe/driver_api.h"

namespace dist_moe::platform {

// A process-wide claim of one CUDA device for an owner; movable, given back by its destructor.
class DeviceClaim {
 public:
  DeviceClaim() = default;  // claims nothing
  // Throws kRuntime "CUDA device N already owns a live <owner>" while another claim holds `device`.
  DeviceClaim(int device, const char* owner);
  DeviceClaim(DeviceClaim&& o) noexcept : device_(o.device_) { o.device_ = -1; }
  DeviceClaim& operator=(DeviceClaim&& o) noexcept;
  DeviceClaim(const DeviceClaim&) = delete;
  DeviceClaim& operator=(const DeviceClaim&) = delete;
  ~DeviceClaim() { give_back(); }

  bool held() const { return device_ >= 0; }
  int device() const { return device_; }
  void give_back();
  // The device stays claimed for the life of the process (memory a failed cleanup left mapped).
  void keep_for_process() { device_ = -1; }

 private:
  int device_ = -1;
};

class VmmRange {
 public:
  struct Section {
    CUmemAllocationProp prop;  // device or pinned host memory
    int64_t offset;            // from the range's base, a multiple of the granularity
    int64_t bytes;             // a multiple of the granularity
  };
  // What a range maps: `bytes` reserved at `alignment`, the sections (ascending, inside the range),
  // and the device that gets read/write access to all of it.
  struct Layout {
    std::vector<Section> sections;
    int64_t bytes = 0;
    int64_t alignment = 0;
    int device = -1;
  };

  // Reserves and maps `layout`. Throws dist_moe::Error (kDriver). The range keeps `claim` (e.g.
  // DeviceClaim(device, "DistMoE VMM-backed activation buffer"), taken by the caller so that a
  // claimed device is refused before any driver call) until it is fully released.
  VmmRange(const DriverApi& driver, Layout layout, DeviceClaim claim = {});
  ~VmmRange();  // releases what is still held; failures go to stderr (release() reports by throwing)
  VmmRange(const VmmRange&) = delete;
  VmmRange& operator=(const VmmRange&) = delete;

  // Releases everything still held. On failure throws (kDriver) naming each failed call and keeps
  // what it could not release for the next call.
  void release();

  CUdeviceptr base() const { return va_; }
  bool held() const { return va_ != 0; }  // the address range is still reserved
  bool claims_device() const { return claim_.held(); }
  // What is still held, per section: its handle (0 once released) and whether it is mapped.
  const std::vector<CUmemGenericAllocationHandle>& handles() const { return handles_; }
  const std::vector<bool>& mapped() const { return mapped_; }

 private:
  // The release steps; returns the failed calls ("" when everything held is released). Gives the
  // device claim back once nothing is held.
  std::string release_steps();

  const DriverApi& d_;
  Layout layout_;
  CUdeviceptr va_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<bool> mapped_;
  DeviceClaim claim_;
};

}  // namespace dist_moe::platform
