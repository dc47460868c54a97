// The VMM range's mapping and every failure path of its release, against a scripted driver (no GPU):
// upstream's VmmOwnershipTest rows for the region itself -- a partial map unwinds what was mapped,
// a failed unmap keeps that section's handle and the address range for a retry, a failed release
// and a failed address free are both reported and retried, and a construction error keeps a failed
// cleanup as its context -- for the device guard the activation buffer takes through it (one live
// VMM buffer per device): refused twice, kept by a failed cleanup until its retry finishes -- and
// for the prefetch (a range mapped on a background thread): the device claimed before the thread
// maps, the range handed over exactly once, another layout refused with no fallback, a failed
// mapping not retried, a failed close keeping the claim, the context's close with one retry.
#if DIST_MOE_TEST_PLATFORM

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "dist_moe/error.h"
#include "platform/vmm_prefetch.h"
#include "platform/vmm_range.h"

namespace dist_moe {
namespace {

using platform::DeviceClaim;
using platform::VmmPrefetch;
using platform::VmmRange;

constexpr CUdeviceptr kBase = 0x100000;
constexpr int64_t kG = 4096;  // the scripted granularity

// What the scripted driver did, call by call, and which calls it fails.
struct Script {
  std::vector<std::string> log;
  int fail_map_call = -1;                            // the n-th cuMemMap (0-based) fails
  int fail_unmaps = 0;                               // the next n cuMemUnmap calls fail
  std::set<CUmemGenericAllocationHandle> bad_release;  // cuMemRelease of these fails
  bool fail_address_free = false;
  int maps = 0;
  CUmemGenericAllocationHandle next_handle = 11;
  std::atomic<bool> hold_create{false};  // cuMemCreate waits while set (a prefetch caught mid-way)
  std::atomic<int> creates_waiting{0};
};
Script* g_script = nullptr;

std::string hex(unsigned long long v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", v);
  return b;
}

CUresult CUDAAPI error_name(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_INVALID_VALUE";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI error_string(CUresult, const char** s) {
  *s = "scripted failure";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI reserve(CUdeviceptr* p, size_t size, size_t alignment, CUdeviceptr, unsigned long long) {
  g_script->log.push_back("reserve " + std::to_string(size) + " align " + std::to_string(alignment));
  *p = kBase;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI address_free(CUdeviceptr p, size_t size) {
  g_script->log.push_back("free " + hex(p) + " " + std::to_string(size));
  return g_script->fail_address_free ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
CUresult CUDAAPI create(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop, unsigned long long) {
  if (g_script->hold_create) {
    ++g_script->creates_waiting;
    while (g_script->hold_create) std::this_thread::yield();
  }
  *h = g_script->next_handle++;
  g_script->log.push_back("create " + std::to_string(*h) + " " + std::to_string(size) +
                          (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? " device" : " host"));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI release(CUmemGenericAllocationHandle h) {
  g_script->log.push_back("release " + std::to_string(h));
  return g_script->bad_release.count(h) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
CUresult CUDAAPI map(CUdeviceptr p, size_t size, size_t, CUmemGenericAllocationHandle h, unsigned long long) {
  const bool fail = g_script->maps++ == g_script->fail_map_call;
  g_script->log.push_back("map " + hex(p) + " " + std::to_string(size) + " " + std::to_string(h) + (fail ? " FAIL" : ""));
  return fail ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}
CUresult CUDAAPI unmap(CUdeviceptr p, size_t size) {
  const bool fail = g_script->fail_unmaps > 0;
  if (fail) --g_script->fail_unmaps;
  g_script->log.push_back("unmap " + hex(p) + " " + std::to_string(size) + (fail ? " FAIL" : ""));
  return fail ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
CUresult CUDAAPI set_access(CUdeviceptr p, size_t size, const CUmemAccessDesc* desc, size_t count) {
  g_script->log.push_back("access " + hex(p) + " " + std::to_string(size) + " device " +
                          std::to_string(desc->location.id) + " x" + std::to_string(count));
  return CUDA_SUCCESS;
}

class VmmRangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_script = &script;
    api.cuGetErrorName = error_name;
    api.cuGetErrorString = error_string;
    api.cuMemAddressReserve = reserve;
    api.cuMemAddressFree = address_free;
    api.cuMemCreate = create;
    api.cuMemRelease = release;
    api.cuMemMap = map;
    api.cuMemUnmap = unmap;
    api.cuMemSetAccess = set_access;
  }
  void TearDown() override { g_script = nullptr; }

  // n sections of one granule each: device, host, device, ...
  static std::vector<VmmRange::Section> sections(int n) {
    std::vector<VmmRange::Section> s;
    for (int i = 0; i < n; ++i) {
      CUmemAllocationProp p{};
      p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      p.location.type = i % 2 == 0 ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
      s.push_back({p, i * kG, kG});
    }
    return s;
  }
  std::vector<std::string> take_log() {
    std::vector<std::string> l;
    l.swap(script.log);
    return l;
  }

  Script script;
  DriverApi api{};
};

using Log = std::vector<std::string>;

TEST_F(VmmRangeTest, MapsSectionsInOrderAndReleasesInReverse) {
  {
    VmmRange r(api, {sections(3), 3 * kG, kG, /*device=*/5});
    EXPECT_EQ(r.base(), kBase);
    EXPECT_EQ(take_log(), (Log{"reserve 12288 align 4096", "create 11 4096 device", "create 12 4096 host",
                               "create 13 4096 device", "map 0x100000 4096 11", "map 0x101000 4096 12",
                               "map 0x102000 4096 13", "access 0x100000 12288 device 5 x1"}));
    r.release();
    EXPECT_FALSE(r.held());
    EXPECT_EQ(take_log(), (Log{"unmap 0x102000 4096", "unmap 0x101000 4096", "unmap 0x100000 4096", "release 13",
                               "release 12", "release 11", "free 0x100000 12288"}));
    r.release();  // nothing left: no call
  }
  EXPECT_TRUE(take_log().empty()) << "a released range's destructor calls nothing";
  {
    VmmRange r(api, {sections(1), kG, kG, 0});
    take_log();
  }
  EXPECT_EQ(take_log(), (Log{"unmap 0x100000 4096", "release 14", "free 0x100000 4096"}))
      << "the destructor releases what is still held";
}

TEST_F(VmmRangeTest, PartialMapFailureUnwindsCompletedMappings) {
  script.fail_map_call = 1;
  try {
    VmmRange r(api, {sections(3), 3 * kG, kG, 0});
    FAIL() << "construction succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA driver error: cuMemMap failed: CUDA_ERROR_OUT_OF_MEMORY"),
              std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("cleanup"), std::string::npos) << e.what();
  }
  const Log log = take_log();
  const Log tail(log.end() - 5, log.end());
  EXPECT_EQ(tail, (Log{"unmap 0x100000 4096", "release 13", "release 12", "release 11", "free 0x100000 12288"}))
      << "only the mapped section 0 is unmapped; every created handle is released, in reverse; the range freed";
}

TEST_F(VmmRangeTest, CleanupPreservesMappedHandleAndRangeForRetry) {
  VmmRange r(api, {sections(2), 2 * kG, kG, 0});
  take_log();
  script.fail_unmaps = 1;  // the first unmap: section 1's
  try {
    r.release();
    FAIL() << "release succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuMemUnmap failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(r.mapped(), (std::vector<bool>{false, true}));
  EXPECT_EQ(r.handles(), (std::vector<CUmemGenericAllocationHandle>{0, 12}));
  EXPECT_TRUE(r.held()) << "the range stays reserved while section 1 is mapped";
  take_log();
  r.release();  // the retry
  EXPECT_EQ(take_log(), (Log{"unmap 0x101000 4096", "release 12", "free 0x100000 8192"}));
  EXPECT_EQ(r.handles(), (std::vector<CUmemGenericAllocationHandle>{0, 0}));
  EXPECT_FALSE(r.held());
}

TEST_F(VmmRangeTest, CleanupChecksReleaseAndAddressResultsWithoutCompacting) {
  VmmRange r(api, {sections(2), 2 * kG, kG, 0});
  take_log();
  script.bad_release = {12};
  script.fail_address_free = true;
  try {
    r.release();
    FAIL() << "release succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    const size_t rel = m.find("cuMemRelease failed"), free = m.find("cuMemAddressFree failed");
    EXPECT_TRUE(rel != std::string::npos && free != std::string::npos && rel < free) << m;
  }
  EXPECT_EQ(r.handles(), (std::vector<CUmemGenericAllocationHandle>{0, 12}))
      << "the failed handle keeps its place (the list is not compacted)";
  EXPECT_EQ(r.mapped(), (std::vector<bool>{false, false}));
  EXPECT_TRUE(r.held());
  script.bad_release.clear();
  script.fail_address_free = false;
  take_log();
  r.release();
  EXPECT_EQ(take_log(), (Log{"release 12", "free 0x100000 8192"}));
  EXPECT_FALSE(r.held());
}

TEST_F(VmmRangeTest, ConstructionErrorKeepsCleanupFailureAsContext) {
  script.fail_map_call = 1;
  script.fail_unmaps = 1;  // the cleanup's unmap of section 0 fails too
  try {
    VmmRange r(api, {sections(2), 2 * kG, kG, 0});
    FAIL() << "construction succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    const size_t root = m.find("cuMemMap failed"), note = m.find("partial-construction cleanup also failed: ");
    EXPECT_TRUE(root != std::string::npos && note != std::string::npos && root < note) << m;
    EXPECT_NE(m.find("cuMemUnmap failed", note), std::string::npos) << m;
  }
}

// Each claim test takes devices of its own: the claims are process-wide and a test may leave one.
constexpr const char* kOwner = "scripted VMM buffer";

TEST_F(VmmRangeTest, ClaimRefusesASecondRangeOnTheDeviceUntilReleased) {
  VmmRange a(api, {sections(1), kG, kG, /*device=*/31}, DeviceClaim(31, kOwner));
  EXPECT_TRUE(a.claims_device());
  take_log();
  try {
    VmmRange b(api, {sections(1), kG, kG, 31}, DeviceClaim(31, kOwner));
    FAIL() << "a second claiming range was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("CUDA device 31 already owns a live scripted VMM buffer"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(take_log().empty()) << "the refusal comes before any driver call";
  {
    VmmRange other_device(api, {sections(1), kG, kG, 32}, DeviceClaim(32, kOwner));  // another device
    VmmRange unclaimed(api, {sections(1), kG, kG, 31});                                // a range that claims nothing
    EXPECT_FALSE(unclaimed.claims_device());
  }
  a.release();
  EXPECT_FALSE(a.claims_device());
  VmmRange b(api, {sections(1), kG, kG, 31}, DeviceClaim(31, kOwner));  // the device is free again
  EXPECT_TRUE(b.claims_device());
}

TEST_F(VmmRangeTest, FailedCleanupKeepsTheClaimUntilItsRetryFinishes) {
  VmmRange a(api, {sections(2), 2 * kG, kG, 33}, DeviceClaim(33, kOwner));
  script.fail_unmaps = 1;
  EXPECT_THROW(a.release(), Error);
  EXPECT_TRUE(a.claims_device()) << "section 1 is still mapped";
  EXPECT_THROW(VmmRange(api, {sections(1), kG, kG, 33}, DeviceClaim(33, kOwner)), Error);
  script.bad_release = {12};  // the retry unmaps section 1, but its handle's release fails
  EXPECT_THROW(a.release(), Error);
  EXPECT_FALSE(a.held()) << "the range is freed once nothing is mapped";
  EXPECT_TRUE(a.claims_device()) << "a handle is still held";
  EXPECT_THROW(VmmRange(api, {sections(1), kG, kG, 33}, DeviceClaim(33, kOwner)), Error);
  script.bad_release.clear();
  a.release();
  EXPECT_FALSE(a.claims_device());
  VmmRange b(api, {sections(1), kG, kG, 33}, DeviceClaim(33, kOwner));
  EXPECT_TRUE(b.claims_device());
}

TEST_F(VmmRangeTest, ConstructionFailureGivesTheClaimBackUnlessItsCleanupFailed) {
  script.fail_map_call = 1;  // the partial map unwinds completely
  EXPECT_THROW(VmmRange(api, {sections(2), 2 * kG, kG, 34}, DeviceClaim(34, kOwner)), Error);
  {
    VmmRange ok(api, {sections(1), kG, kG, 34}, DeviceClaim(34, kOwner));
    EXPECT_TRUE(ok.claims_device());
  }
  script.maps = 0;
  script.fail_map_call = 1;
  script.fail_unmaps = 1;  // ... and its cleanup leaves section 0 mapped: the device stays claimed
  EXPECT_THROW(VmmRange(api, {sections(2), 2 * kG, kG, 35}, DeviceClaim(35, kOwner)), Error);
  try {
    VmmRange again(api, {sections(1), kG, kG, 35}, DeviceClaim(35, kOwner));
    FAIL() << "a device whose memory is still mapped was claimed again";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRuntime) << e.what();
  }
}


// ---- the prefetch --------------------------------------------------------------------------------

bool device_is_free(int device) {
  try {
    DeviceClaim probe(device, kOwner);
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST_F(VmmRangeTest, PrefetchMapsOnItsThreadWithTheDeviceClaimedAndHandsTheRangeOverOnce) {
  script.hold_create = true;
  std::thread::id mapper;
  const VmmPrefetch::Layout layout = VmmRange::Layout{sections(2), 2 * kG, kG, 40};
  VmmPrefetch p(api, layout, DeviceClaim(40, kOwner), [&mapper] { mapper = std::this_thread::get_id(); });
  while (script.creates_waiting == 0) std::this_thread::yield();  // the thread is inside the mapping
  EXPECT_FALSE(device_is_free(40)) << "the device is claimed while the prefetch maps";
  script.hold_create = false;
  std::unique_ptr<VmmRange> r = p.take(layout);
  EXPECT_NE(mapper, std::this_thread::get_id()) << "the mapping ran on another thread";
  EXPECT_EQ(r->base(), kBase);
  EXPECT_TRUE(r->claims_device()) << "the claim travels with the range";
  EXPECT_EQ(take_log(), (Log{"reserve 8192 align 4096", "create 11 4096 device", "create 12 4096 host",
                             "map 0x100000 4096 11", "map 0x101000 4096 12", "access 0x100000 8192 device 40 x1"}));
  EXPECT_TRUE(p.taken());
  try {
    p.take(layout);
    FAIL() << "the prefetch was consumed twice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("already consumed"), std::string::npos) << e.what();
  }
  p.close();
  EXPECT_TRUE(take_log().empty()) << "closing a consumed prefetch releases nothing: the range is the consumer's";
  r->release();
  EXPECT_TRUE(device_is_free(40));
}

TEST_F(VmmRangeTest, PrefetchOfAnotherLayoutIsClosedWithoutAFallback) {
  VmmPrefetch p(api, VmmRange::Layout{sections(1), kG, kG, 41}, DeviceClaim(41, kOwner), {});
  try {
    p.take(VmmRange::Layout{sections(2), 2 * kG, kG, 41});
    FAIL() << "a prefetch of another layout was handed over";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("4096 bytes in 1 sections prefetched, 8192 in 2 wanted"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(take_log(), (Log{"reserve 4096 align 4096", "create 11 4096 device", "map 0x100000 4096 11",
                             "access 0x100000 4096 device 41 x1", "unmap 0x100000 4096", "release 11",
                             "free 0x100000 4096"}))
      << "one range is built, and released: nothing is mapped again for the wanted layout";
  EXPECT_TRUE(device_is_free(41));
  EXPECT_THROW(p.take(VmmRange::Layout{sections(1), kG, kG, 41}), Error) << "a closed prefetch hands nothing over";
}

TEST_F(VmmRangeTest, PrefetchFailureIsReportedAndNotRetried) {
  script.fail_map_call = 0;
  const VmmPrefetch::Layout layout = VmmRange::Layout{sections(2), 2 * kG, kG, 42};
  VmmPrefetch p(api, layout, DeviceClaim(42, kOwner), {});
  try {
    p.take(layout);
    FAIL() << "a failed prefetch was handed over";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("the DistMoE VMM prefetch failed: CUDA driver error: cuMemMap failed"),
              std::string::npos) << e.what();
  }
  const Log log = take_log();
  EXPECT_EQ(std::count(log.begin(), log.end(), std::string("reserve 8192 align 4096")), 1) << "no second mapping";
  EXPECT_TRUE(device_is_free(42)) << "the failed mapping unwound completely and gave the claim back";
  p.close();
  EXPECT_TRUE(take_log().empty());
}

TEST_F(VmmRangeTest, PrefetchCloseKeepsTheClaimUntilItsRetrySucceeds) {
  {
    VmmPrefetch p(api, VmmRange::Layout{sections(2), 2 * kG, kG, 43}, DeviceClaim(43, kOwner), {});
    script.fail_unmaps = 1;
    p.close_retrying_once();  // the first close fails at section 1's unmap, the retry finishes
    EXPECT_TRUE(device_is_free(43));
  }
  {
    VmmPrefetch p(api, VmmRange::Layout{sections(2), 2 * kG, kG, 44}, DeviceClaim(44, kOwner), {});
    script.fail_unmaps = 1000;  // every unmap of both attempts
    try {
      p.close_retrying_once();
      FAIL() << "the cleanup succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRuntime);
      EXPECT_NE(std::string(e.what()).find("DistMoE VMM prefetch cleanup retry also failed: VMM range release failed: "
                                           "cuMemUnmap failed"),
                std::string::npos) << e.what();
    }
    EXPECT_FALSE(device_is_free(44)) << "its sections are still mapped: the device stays claimed";
    script.fail_unmaps = 0;
    p.close();  // a later close finishes the release
    EXPECT_TRUE(device_is_free(44));
  }
  {
    VmmPrefetch dropped(api, VmmRange::Layout{sections(1), kG, kG, 45}, DeviceClaim(45, kOwner), {});
  }
  EXPECT_TRUE(device_is_free(45)) << "a prefetch dropped unconsumed releases its range";
  const Log log = take_log();
  EXPECT_EQ(log.back(), "free 0x100000 4096");
}

}  // namespace
}  // namespace dist_moe

#endif  // DIST_MOE_TEST_PLATFORM
