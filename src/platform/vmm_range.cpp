#include "platform/vmm_range.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "dist_moe/error.h"

namespace dist_moe::platform {
namespace {

// "call failed: CUDA_ERROR_X (text)" through the range's own driver entry points.
std::string failure(const DriverApi& d, const char* call, CUresult r) {
  return std::string(call) + " failed: " + driver_error_name(d, r) + " (" + driver_error_text(d, r) + ")";
}

// The devices a DeviceClaim holds.
std::mutex g_claims_mutex;
std::set<int> g_claimed_devices;

}  // namespace

DeviceClaim::DeviceClaim(int device, const char* owner) {
  std::lock_guard<std::mutex> lock(g_claims_mutex);
  if (!g_claimed_devices.insert(device).second)
    throw Error(ErrorCode::kRuntime, "CUDA device " + std::to_string(device) + " already owns a live " + owner);
  device_ = device;
}

DeviceClaim& DeviceClaim::operator=(DeviceClaim&& o) noexcept {
  if (this != &o) {
    give_back();
    device_ = o.device_;
    o.device_ = -1;
  }
  return *this;
}

void DeviceClaim::give_back() {
  if (device_ < 0) return;
  std::lock_guard<std::mutex> lock(g_claims_mutex);
  g_claimed_devices.erase(device_);
  device_ = -1;
}

VmmRange::VmmRange(const DriverApi& driver, Layout layout, DeviceClaim claim)
    : d_(driver), layout_(std::move(layout)), claim_(std::move(claim)) {
  const std::vector<Section>& sections = layout_.sections;
  handles_.assign(sections.size(), 0);
  mapped_.assign(sections.size(), false);
  // The first failing step, then everything done so far undone.
  const auto step = [&](const char* call, CUresult r) {
    if (r == CUDA_SUCCESS) return;
    std::string message = "CUDA driver error: " + failure(d_, call, r);
    const std::string cleanup = release_steps();
    if (!cleanup.empty()) {
      message += "; partial-construction cleanup also failed: " + cleanup;
      claim_.keep_for_process();  // this object dies unreleased: its memory keeps the device
    }
    throw Error(ErrorCode::kDriver, message);
  };
  step("cuMemAddressReserve",
       d_.cuMemAddressReserve(&va_, static_cast<size_t>(layout_.bytes), static_cast<size_t>(layout_.alignment), 0, 0));
  for (size_t i = 0; i < sections.size(); ++i)
    step("cuMemCreate", d_.cuMemCreate(&handles_[i], static_cast<size_t>(sections[i].bytes), &sections[i].prop, 0));
  for (size_t i = 0; i < sections.size(); ++i) {
    step("cuMemMap", d_.cuMemMap(va_ + sections[i].offset, static_cast<size_t>(sections[i].bytes), 0, handles_[i], 0));
    mapped_[i] = true;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = layout_.device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  step("cuMemSetAccess", d_.cuMemSetAccess(va_, static_cast<size_t>(layout_.bytes), &access, 1));
}

std::string VmmRange::release_steps() {
  const std::vector<Section>& sections = layout_.sections;
  std::string errors;
  const auto ok = [&](const char* call, CUresult r) {
    if (r != CUDA_SUCCESS) errors += (errors.empty() ? "" : "; ") + failure(d_, call, r);
    return r == CUDA_SUCCESS;
  };
  for (size_t i = sections.size(); i-- > 0;) {  // the reverse of mapping
    if (mapped_[i] && ok("cuMemUnmap", d_.cuMemUnmap(va_ + sections[i].offset, static_cast<size_t>(sections[i].bytes))))
      mapped_[i] = false;
  }
  bool any_mapped = false;
  for (size_t i = sections.size(); i-- > 0;) {
    if (handles_[i] != 0 && !mapped_[i] && ok("cuMemRelease", d_.cuMemRelease(handles_[i]))) handles_[i] = 0;
    any_mapped = any_mapped || mapped_[i];
  }
  // The range can go once nothing is mapped into it, whatever became of the handles.
  if (va_ != 0 && !any_mapped &&
      ok("cuMemAddressFree", d_.cuMemAddressFree(va_, static_cast<size_t>(layout_.bytes))))
    va_ = 0;
  const bool released = va_ == 0 && std::all_of(handles_.begin(), handles_.end(), [](auto h) { return h == 0; });
  if (released) claim_.give_back();
  return errors;
}

void VmmRange::release() {
  const std::string errors = release_steps();
  if (!errors.empty()) throw Error(ErrorCode::kDriver, "VMM range release failed: " + errors);
}

VmmRange::~VmmRange() {
  const std::string errors = release_steps();
  if (!errors.empty()) {
    std::fprintf(stderr, "dist-moe: warning: VMM range release failed: %s\n", errors.c_str());
    claim_.keep_for_process();  // what is still held keeps the device
  }
}

}  // namespace dist_moe::platform
