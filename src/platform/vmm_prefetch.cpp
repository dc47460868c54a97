#include "platform/vmm_prefetch.h"

#include <cstdio>
#include <string>
#include <utility>

#include "dist_moe/error.h"

namespace dist_moe::platform {
namespace {

bool same_layout(const VmmPrefetch::Layout& a, const VmmPrefetch::Layout& b) {
  if (a.bytes != b.bytes || a.alignment != b.alignment || a.device != b.device ||
      a.sections.size() != b.sections.size())
    return false;
  for (size_t i = 0; i < a.sections.size(); ++i) {
    const VmmRange::Section &x = a.sections[i], &y = b.sections[i];
    if (x.offset != y.offset || x.bytes != y.bytes || x.prop.type != y.prop.type ||
        x.prop.location.type != y.prop.location.type || x.prop.location.id != y.prop.location.id)
      return false;
  }
  return true;
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

VmmPrefetch::VmmPrefetch(const DriverApi& driver, Layout layout, DeviceClaim claim, std::function<void()> thread_init)
    : d_(driver), layout_(std::move(layout)) {
  // The thread owns the claim until its range does (a failed mapping gives it back, or keeps it when
  // the cleanup left memory mapped: VmmRange).
  thread_ = std::thread([this, claim = std::move(claim), init = std::move(thread_init)]() mutable {
    try {
      if (init) init();
      range_ = std::make_unique<VmmRange>(d_, layout_, std::move(claim));
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

void VmmPrefetch::join() {
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<VmmRange> VmmPrefetch::take(const Layout& wanted) {
  join();
  if (taken_) throw Error(ErrorCode::kRuntime, "the DistMoE VMM prefetch was already consumed");
  if (closed_) throw Error(ErrorCode::kRuntime, "the DistMoE VMM prefetch was closed");
  if (error_) throw Error(ErrorCode::kRuntime, "the DistMoE VMM prefetch failed: " + message_of(error_));
  if (!same_layout(wanted, layout_)) {
    close();
    throw Error(ErrorCode::kInternal, "the DistMoE VMM prefetch mapped another layout than its consumer asks for (" +
                                          std::to_string(layout_.bytes) + " bytes in " +
                                          std::to_string(layout_.sections.size()) + " sections prefetched, " +
                                          std::to_string(wanted.bytes) + " in " +
                                          std::to_string(wanted.sections.size()) + " wanted); it was closed");
  }
  taken_ = true;
  return std::move(range_);
}

void VmmPrefetch::close() {
  join();
  closed_ = true;
  if (!range_) return;
  range_->release();  // throws keeping what is still held (and the claim) for the next close()
  range_.reset();
}

void VmmPrefetch::close_retrying_once() {
  try {
    close();
    return;
  } catch (const std::exception&) {
  }
  try {
    close();
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kRuntime, std::string("DistMoE VMM prefetch cleanup retry also failed: ") + e.what());
  }
}

VmmPrefetch::~VmmPrefetch() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist-moe: warning: VMM prefetch close failed: %s\n", e.what());
  }
}

}  // namespace dist_moe::platform
