// The activation buffer (plain and VMM with pinned host overflow) and the device planner kernels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/planner.h"
#include "runtime/activation_buffer.h"

namespace dist_moe {
namespace {

using testing::DeviceBuffer;

Config small_config() {
  Config c;
  c.max_num_local_input_tokens = 256;
  c.hidden_dim = 128;
  c.intermediate_dim = 8192;
  c.top_k = 1;
  c.num_experts = 1;
  c.max_moe_layers_per_activation_slot = 1;
  c.device_scratch_capacity_factor = 0.5;
  c.vmm = VmmConfig{1.0, false};
  return c;
}

__global__ void touch_kernel(uint8_t* p, int64_t n, int pass) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>((i * 7 + pass) & 0xff);
}

__global__ void check_kernel(const uint8_t* p, int64_t n, int pass, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (p[i] != static_cast<uint8_t>((i * 7 + pass) & 0xff)) atomicAdd(bad, 1ull);
}

TEST(ActivationBuffer, VmmMapsHostOverflowBetweenDeviceSectionsAndReleasesIt) {
  DMOE_REQUIRE_SM90();
  const Config c = small_config();
  const int64_t G = runtime::vmm_allocation_granularity(0);
  const MemoryPlan plan = plan_memory(c, 1, PlanOptions{G});
  ASSERT_TRUE(plan.uses_host_scratch());
  auto buf = runtime::ActivationBuffer::create(plan, /*use_vmm=*/true, 0);
  ASSERT_TRUE(buf->uses_vmm());
  ASSERT_EQ(buf->size(), plan.total_virtual_bytes);
  const auto& s = buf->sections();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].kind, runtime::ActivationBuffer::SectionKind::kHost);
  EXPECT_EQ(s[1].bytes, plan.vmm_host_section_bytes);
  EXPECT_EQ(s[2].offset + s[2].bytes, buf->size());  // no guard requested
  // A second VMM buffer on the same device is refused.
  try {
    runtime::ActivationBuffer::create(plan, true, 0);
    ADD_FAILURE() << "second VMM buffer was created";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already owns a live DistMoE VMM-backed activation buffer"), std::string::npos);
  }
  // Every byte, host pages included, is device-readable and -writable.
  DeviceBuffer<unsigned long long> bad(1);
  DMOE_CUDA_CHECK(cudaMemset(bad.get(), 0, sizeof(unsigned long long)));
  touch_kernel<<<264, 256>>>(buf->data(), buf->size(), 3);
  check_kernel<<<264, 256>>>(buf->data(), buf->size(), 3, bad.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bad.download()[0], 0ull);
  buf->close();
  auto again = runtime::ActivationBuffer::create(plan, true, 0);  // released: a new one is allowed
  EXPECT_TRUE(again->uses_vmm());
}

// VmmConfig::prefetch: the range mapped on a background thread, claimed at once, handed over once.
TEST(ActivationBuffer, PrefetchedVmmIsTheSynchronousLayoutAndIsHandedOverOnce) {
  DMOE_REQUIRE_SM90();
  const Config c = small_config();
  const int64_t G = runtime::vmm_allocation_granularity(0);
  const MemoryPlan plan = plan_memory(c, 1, PlanOptions{G});
  ASSERT_TRUE(plan.uses_host_scratch());
  const auto expect_refused = [&](const char* what, auto&& make) {
    try {
      make();
      ADD_FAILURE() << what << " was created";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already owns a live DistMoE VMM-backed activation buffer"),
                std::string::npos) << what << ": " << e.what();
    }
  };
  std::vector<runtime::ActivationBuffer::Section> sync_sections;
  {
    auto sync = runtime::ActivationBuffer::create(plan, true, 0, /*guard_bytes=*/4096);
    sync_sections = sync->sections();
  }
  auto prefetch = runtime::ActivationBuffer::prefetch(plan, true, 0, 4096);
  ASSERT_NE(prefetch, nullptr);
  expect_refused("a VMM buffer beside a pending prefetch", [&] { runtime::ActivationBuffer::create(plan, true, 0); });
  expect_refused("a second prefetch", [&] { runtime::ActivationBuffer::prefetch(plan, true, 0); });
  auto buf = runtime::ActivationBuffer::create(plan, true, 0, 4096, prefetch.get());
  ASSERT_TRUE(buf->uses_vmm());
  ASSERT_EQ(buf->size(), plan.total_virtual_bytes);
  ASSERT_EQ(buf->sections().size(), sync_sections.size());
  for (size_t i = 0; i < sync_sections.size(); ++i) {
    EXPECT_EQ(buf->sections()[i].kind, sync_sections[i].kind) << i;
    EXPECT_EQ(buf->sections()[i].offset, sync_sections[i].offset) << i;
    EXPECT_EQ(buf->sections()[i].bytes, sync_sections[i].bytes) << i;
  }
  DeviceBuffer<unsigned long long> bad(1);
  DMOE_CUDA_CHECK(cudaMemset(bad.get(), 0, sizeof(unsigned long long)));
  touch_kernel<<<264, 256>>>(buf->data(), buf->size(), 5);
  check_kernel<<<264, 256>>>(buf->data(), buf->size(), 5, bad.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bad.download()[0], 0ull) << "the prefetched range, host pages included, is device-readable and -writable";
  try {
    runtime::ActivationBuffer::create(plan, true, 0, 4096, prefetch.get());
    ADD_FAILURE() << "a prefetch was consumed twice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already consumed"), std::string::npos) << e.what();
  }
  buf->close();
  {
    // A prefetch of another layout (no guard) for a buffer that wants a guard: refused, closed, and
    // nothing mapped in its place; the device is free again.
    auto other = runtime::ActivationBuffer::prefetch(plan, true, 0, 0);
    try {
      runtime::ActivationBuffer::create(plan, true, 0, 4096, other.get());
      ADD_FAILURE() << "a prefetch of another layout was handed over";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInternal) << e.what();
    }
  }
  runtime::ActivationBuffer::prefetch(plan, true, 0).reset();  // dropped unconsumed: released
  auto failed_build = runtime::ActivationBuffer::prefetch(plan, true, 0);
  failed_build->close_retrying_once();  // a context's cleanup after its build failed
  auto again = runtime::ActivationBuffer::create(plan, true, 0);  // the device is free
  EXPECT_TRUE(again->uses_vmm());
}

TEST(ActivationBuffer, PlainBufferHasTheDeviceBytes) {
  DMOE_REQUIRE_SM90();
  Config c = small_config();
  c.vmm.reset();
  const MemoryPlan plan = plan_memory(c, 1);
  auto buf = runtime::ActivationBuffer::create(plan, false, 0);
  EXPECT_FALSE(buf->uses_vmm());
  EXPECT_EQ(buf->size(), plan.total_device_buffer_bytes);
}

// The planner kernels give the same decisions and offsets as the host functions (CPU-tested).
TEST(PlannerKernels, MatchTheHostPlanner) {
  DMOE_REQUIRE_SM90();
  Config c;
  c.max_num_local_input_tokens = 32;
  c.hidden_dim = 256;
  c.intermediate_dim = 128;
  c.top_k = 2;
  c.num_experts = 8;
  c.max_moe_layers_per_activation_slot = 2;
  c.activation_slot_capacity_factor = 1.0;
  c.device_scratch_capacity_factor = 2.0;
  const int64_t R = 2;
  const MemoryPlan p = plan_memory(c, R);
  const planner::BufferGeometry g{p.num_activation_slots, p.activation_slot_bytes, p.total_device_buffer_bytes};
  const planner::CallShape shape{32, 256, 128, 2, R, 1};
  const int64_t N = g.num_slots;
  DeviceBuffer<int64_t> saved(N * R), layer(N), peak(N + 1), slot(std::vector<int64_t>{0});
  DeviceBuffer<int32_t> recv(std::vector<int32_t>{64, 64});
  DeviceBuffer<int64_t> l0(planner::layer_state_size(R)), l1(planner::layer_state_size(R)), bo(7);
  const planner::PlannerState st{saved.get(), layer.get(), peak.get()};
  kernels::reset_planner(g, R, st, nullptr);
  kernels::plan_forward(g, shape, st, slot.get(), 2, recv.get(), nullptr, false, l0.get(), nullptr);
  kernels::plan_forward(g, shape, st, slot.get(), 2, recv.get(), nullptr, false, l1.get(), nullptr);
  kernels::plan_backward(g, shape, st, l1.get(), -4096, bo.get(), nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<int64_t> hs(N * R), hl(N), hp(N + 1);
  const planner::PlannerState hst{hs.data(), hl.data(), hp.data()};
  planner::reset_planner(g, R, hst);
  std::vector<int64_t> h0(planner::layer_state_size(R)), h1(planner::layer_state_size(R));
  const int32_t rows[2] = {64, 64};
  ASSERT_EQ(planner::plan_bf16_forward(g, shape, hst, 0, 2, rows, false, h0.data()), planner::PlanStatus::kOk);
  ASSERT_EQ(planner::plan_bf16_forward(g, shape, hst, 0, 2, rows, false, h1.data()), planner::PlanStatus::kOk);
  planner::Bf16BackwardOffsets hb{};
  ASSERT_EQ(planner::plan_bf16_backward(g, shape, hst, h1.data(), -4096, &hb), planner::PlanStatus::kOk);
  EXPECT_EQ(l0.download(), h0);
  EXPECT_EQ(l1.download(), h1);
  EXPECT_EQ(bo.download(), (std::vector<int64_t>{hb.grad_h1, hb.h2, hb.grad_h2, hb.grad_h3_gathered, hb.h1,
                                                 hb.x_gathered, hb.x}));
  EXPECT_EQ(saved.download(), hs);
  EXPECT_EQ(layer.download(), hl);
}

}  // namespace
}  // namespace dist_moe
