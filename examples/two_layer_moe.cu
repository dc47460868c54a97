// A two-layer residual MoE (y1 = x + moe1(x), y2 = y1 + moe2(y1)) trained for one step on every
// local GPU, checked against the CPU oracle of all ranks. Start it with one process per GPU:
//
//   build/tests/dmoe_launch -n 2 -- build/examples/two_layer_moe
//
// (`dist-moe demo` does this when SM90 GPUs are present.) Both layers share activation slot 0,
// so their backward pops them in reverse order; the output, the input gradient and all four weight
// gradients are compared with the oracle at upstream's BF16 tolerances.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "testing/dist_env.h"
#include "dist_moe/check.h"
#include "dist_moe/context.h"
#include "dist_moe/nccl_version.h"
#include "dist_moe/routed_experts.h"
#include "reference/oracle.h"

namespace {

using namespace dist_moe;
using reference::TensorF;

constexpr int64_t kT = 64, kD = 512, kF = 256, kK = 2, kE = 8;

__global__ void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : bytes(n) { DMOE_CUDA_CHECK(cudaMalloc(&p, n)); }
  Buf(const void* host, size_t n) : Buf(n) { DMOE_CUDA_CHECK(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice)); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::vector<uint16_t> bf16() const {
    std::vector<uint16_t> h(bytes / 2);
    DMOE_CUDA_CHECK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
    return h;
  }
};

TensorF tensor(const std::vector<uint16_t>& bits, std::vector<int64_t> shape) {
  TensorF t(std::move(shape));
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&t.data[i], &u, 4);
  }
  return t;
}

TensorF add_round(const TensorF& a, const TensorF& b) {  // BF16(a + b), as add_bf16
  TensorF c(a.shape);
  for (size_t i = 0; i < a.data.size(); ++i) c.data[i] = numeric::round_bf16(a.data[i] + b.data[i]);
  return c;
}

reference::Problem layer_problem(int world, uint64_t seed, const std::vector<TensorF>* x) {
  reference::RandomProblemSpec s;
  s.num_ranks = world;
  s.tokens_per_rank = kT;
  s.hidden_dim = kD;
  s.intermediate_dim = kF;
  s.top_k = kK;
  s.num_experts = kE;
  s.seed = seed;
  reference::Problem p = reference::make_random_problem(s);
  if (x) p.x_TD = *x;  // layer 2 consumes layer 1's output
  return p;
}

}  // namespace

int run_example() {
  check_nccl_runtime_version();  // an NCCL without the device API fails here, in one line
  const auto env = testing::dist_env_from_environment();
  const int rank = env.rank, world = env.world;
  int ndev = 0;
  DMOE_CUDA_CHECK(cudaGetDeviceCount(&ndev));
  DMOE_CUDA_CHECK(cudaSetDevice(env.local_rank % ndev));
  const ncclUniqueId id = testing::exchange_unique_id(env, "two_layer_moe");
  ncclComm_t nccl = nullptr;
  DMOE_NCCL_CHECK(ncclCommInitRank(&nccl, world, id, rank));
  cudaStream_t stream;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // ---- the oracle of both layers on all ranks (every rank computes the same) ----
  const reference::Problem p1 = layer_problem(world, 101, nullptr);
  const auto f1 = reference::forward(p1);
  std::vector<TensorF> y1;
  for (int r = 0; r < world; ++r) y1.push_back(add_round(p1.x_TD[r], f1.ranks[r].out_TD));
  const reference::Problem p2 = layer_problem(world, 202, &y1);
  const auto f2 = reference::forward(p2);
  const auto grad_y2 = reference::make_random_grad_out(p2, 303);
  reference::BackwardOptions bo;
  bo.wgrad_dtype = DType::kFloat32;
  const auto b2 = reference::backward(p2, f2, grad_y2, bo);
  std::vector<TensorF> grad_y1;  // residual: grad_y2 + grad through moe2
  for (int r = 0; r < world; ++r) grad_y1.push_back(add_round(grad_y2[r], b2.ranks[r].grad_x_TD));
  const auto b1 = reference::backward(p1, f1, grad_y1, bo);

  // ---- the GPU: one context, both layers in slot 0 ----
  Config cfg;
  cfg.max_num_local_input_tokens = kT;
  cfg.hidden_dim = kD;
  cfg.intermediate_dim = kF;
  cfg.top_k = kK;
  cfg.num_experts = kE;
  cfg.max_moe_layers_per_activation_slot = 2;
  cfg.device_scratch_capacity_factor = world;
  cfg.activation_slot_capacity_factor = 0.5;  // some layers may recompute
  cfg.wgrad_dtype = DType::kFloat32;
  auto ctx = Context::create(cfg, nccl);
  if (rank == 0) std::fputs(ctx->memory_plan().explain().c_str(), stdout);
  const int64_t L = ctx->local_experts();
  const reference::Problem* problems[2] = {&p1, &p2};
  std::vector<std::unique_ptr<Buf>> keep;
  auto upload = [&](const std::vector<uint16_t>& bits) {
    keep.push_back(std::make_unique<Buf>(bits.data(), bits.size() * 2));
    return keep.back()->p;
  };
  RoutedExpertsInputs in[2];
  for (int l = 0; l < 2; ++l) {
    const auto& p = *problems[l];
    keep.push_back(std::make_unique<Buf>(p.ids_TK[rank].data(), p.ids_TK[rank].size() * 4));
    in[l].topk_ids_TK = keep.back()->p;
    keep.push_back(std::make_unique<Buf>(p.scores_TK[rank].data.data(), p.scores_TK[rank].data.size() * 4));
    in[l].topk_scores_TK = keep.back()->p;
    in[l].num_tokens = kT;
    in[l].w13 = upload(reference::to_bf16_bits(p.local_w13(rank)));
    in[l].w13_shape = {L, 2 * kF, kD};
    in[l].w2 = upload(reference::to_bf16_bits(p.local_w2(rank)));
    in[l].w2_shape = {L, kD, kF};
  }
  Buf x(kT * kD * 2), out1(kT * kD * 2), y1d(kT * kD * 2), out2(kT * kD * 2), y2(kT * kD * 2);
  DMOE_CUDA_CHECK(cudaMemcpy(x.p, reference::to_bf16_bits(p1.x_TD[rank]).data(), x.bytes, cudaMemcpyHostToDevice));
  in[0].x_TD = x.p;
  in[1].x_TD = y1d.p;
  SavedState s1(*ctx), s2(*ctx);
  ExecutionOptions opts;
  // The uploads above ran on the legacy stream, which `stream` (non-blocking) does not wait for, and
  // a pageable cudaMemcpy may return before its DMA lands: finish them before the first call.
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  auto bf = [](const Buf& b) { return static_cast<__nv_bfloat16*>(b.p); };
  routed_experts_forward(*ctx, in[0], out1.p, &s1, opts, stream);
  add_bf16<<<64, 256, 0, stream>>>(bf(x), bf(out1), bf(y1d), kT * kD);
  routed_experts_forward(*ctx, in[1], out2.p, &s2, opts, stream);
  add_bf16<<<64, 256, 0, stream>>>(bf(y1d), bf(out2), bf(y2), kT * kD);

  Buf gy2(reference::to_bf16_bits(grad_y2[rank]).data(), kT * kD * 2), gx2(kT * kD * 2), gy1(kT * kD * 2),
      gx1(kT * kD * 2), gs1(kT * kK * 4), gs2(kT * kK * 4);
  Buf gw13[2] = {Buf(L * 2 * kF * kD * 4), Buf(L * 2 * kF * kD * 4)};
  Buf gw2[2] = {Buf(L * kD * kF * 4), Buf(L * kD * kF * 4)};
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());  // gy2's upload, as above
  RoutedExpertsGradients g2{gx2.p, gs2.p, gw13[1].p, gw2[1].p, DType::kFloat32, false};
  routed_experts_backward(*ctx, in[1], s2, gy2.p, g2, opts, stream);
  add_bf16<<<64, 256, 0, stream>>>(bf(gy2), bf(gx2), bf(gy1), kT * kD);
  RoutedExpertsGradients g1{gx1.p, gs1.p, gw13[0].p, gw2[0].p, DType::kFloat32, false};
  routed_experts_backward(*ctx, in[0], s1, gy1.p, g1, opts, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));

  // ---- compare ----
  auto f32 = [](const Buf& b, std::vector<int64_t> shape) {
    TensorF t(std::move(shape));
    DMOE_CUDA_CHECK(cudaMemcpy(t.data.data(), b.p, b.bytes, cudaMemcpyDeviceToHost));
    return t;
  };
  const reference::Tolerance out_tol{2e-2, 2e-2, 5e-3, 0.999}, grad_tol{3e-2, 3e-2, 1e-2, 0.995},
      w_tol{3e-2, 1.0, 1.5e-2, 0.995};
  struct Check {
    const char* name;
    reference::Comparison c;
  } checks[] = {
      {"y2", reference::compare(tensor(y2.bf16(), {kT, kD}), add_round(y1[rank], f2.ranks[rank].out_TD), out_tol)},
      {"grad_x", reference::compare(tensor(gx1.bf16(), {kT, kD}), b1.ranks[rank].grad_x_TD, grad_tol)},
      {"layer1 dW13", reference::compare(f32(gw13[0], {L, 2 * kF, kD}), b1.ranks[rank].dw13_EFD, w_tol)},
      {"layer1 dW2", reference::compare(f32(gw2[0], {L, kD, kF}), b1.ranks[rank].dw2_EDF, w_tol)},
      {"layer2 dW13", reference::compare(f32(gw13[1], {L, 2 * kF, kD}), b2.ranks[rank].dw13_EFD, w_tol)},
      {"layer2 dW2", reference::compare(f32(gw2[1], {L, kD, kF}), b2.ranks[rank].dw2_EDF, w_tol)},
  };
  bool ok = true;
  for (const auto& c : checks) {
    std::printf("rank %d %-12s relL2 %.2e cos %.6f %s\n", rank, c.name, c.c.rel_l2, c.c.cosine,
                c.c.passed ? "ok" : "MISMATCH");
    ok &= c.c.passed;
  }
  ctx->close();
  DMOE_NCCL_CHECK(ncclCommDestroy(nccl));
  std::printf("rank %d: two-layer MoE forward+backward %s the CPU oracle\n", rank, ok ? "matches" : "DOES NOT match");
  return ok ? 0 : 1;
}

// Every failure (no usable GPU, an NCCL without the device API, a CUDA error) ends as one line that
// names it and a non-zero exit, never std::terminate.
int main() {
  try {
    return run_example();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "two_layer_moe: error: %s ('dist-moe info' shows the GPUs and the NCCL in use)\n", e.what());
    return 1;
  }
}
