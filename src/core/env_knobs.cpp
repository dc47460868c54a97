#include "env_knobs.h"

#include <cstdlib>
#include <cstring>

#include "dist_moe/error.h"

namespace dist_moe::core {

const std::vector<EnvKnob>& env_knobs() {
  static const std::vector<EnvKnob> table = {
      {"DMOE_COMM_TIMEOUT_MS", "milliseconds > 0",
       "limit of every device spin-wait (barriers, signals) when ContextOptions::comm_timeout_ms is 0; default 60000"},
      {"DMOE_DEBUG_STAGE_DELAY", "rank:stage:us[,...]",
       "that rank spins `us` microseconds after that pipeline stage (`*`: every stage): ordering checks"},
      {"DMOE_DISABLE_PDL", "1", "no programmatic dependent launch anywhere (diagnostic)"},
      {"DMOE_COMBINE_ALGO", "v1 | v2 | partials", "combine algorithm when the caller asks for auto; default v2"},
      {"DMOE_COMBINE_OWN_PARTIALS", "late", "rank-partials combine: sum this rank's own partials in its reduction"},
      {"DMOE_COMBINE_REDUCE_WARPS", "integer", "signal combine: reducing warps per CTA when the options leave it 0; default 4"},
      {"DMOE_COMBINE_SIGNAL_BATCH", "integer", "signal combine: scatter units per signal when the options leave it 0; default 1"},
      {"DMOE_COMBINE_REDUCE_CTAS", "integer", "signal combine: CTAs that only reduce; default 0 (the warp split)"},
      {"DMOE_COMBINE_K_GROUP", "integer", "combine v2: consecutive k per scatter unit; default 0 (automatic)"},
      {"DMOE_FUSED_ROUTE", "0 | 1", "fused publish + route + dispatch kernel where the group allows it; default 1"},
      {"DMOE_FUSED_MAX_ROUTES", "integer", "lowers the R*T_max*K limit of the fused route kernel (16384)"},
      {"DMOE_GEMM_LEGACY", "1", "grouped GEMM heuristic: the first version's choices (synchronous epilogues), for A/B runs"},
      {"DMOE_GEMM_EXPERIMENTAL", "1", "grouped GEMM heuristic: the schemes still waiting for their first measurement"},
      {"DMOE_PRINT_GEMM_CONFIG", "1", "print each distinct grouped GEMM problem and its configuration once"},
      {"DMOE_FP8_SWAPAB_MAX_ROWS", "integer",
       "FP8-blockwise decode-sized W13 (and W2 with DMOE_FP8_W2_SWAPAB): swap-AB tile up to this many token rows per expert (A/B); default 16"},
      {"DMOE_FP8_W2_SWAPAB", "1",
       "FP8-blockwise decode-sized plain FPROP (W2): the swap-AB tile as W13 takes it, not the 128x256 tile (A/B)"},
      {"DMOE_MEGA_FUSED_DGRAD_SWIGLU", "1",
       "MXFP8 Mega training: W2 DGRAD + SwiGLU backward + dxy quantization in one launch instead of the staged pair (A/B)"},
      {"DMOE_W13_PROMOTE_K", "128, 64, 32",
       "Training and inference layers: the FP8-blockwise W13 FPROP folds its tensor-core sums into FP32 every this many of K; default 64 in MXFP8 contexts, 128 in FP8-blockwise ones; 32 only where the 4-stage tile fits (A/B)"},
      {"DMOE_MXFP8_EXACT", "1",
       "MXFP8 training: prepared weights keep upstream's exact 32x32 tile bytes and the FPROPs and DGRADs run the per-32 MXFP8 GEMM, instead of the tiles at shared 128x128 scales and the FP8-blockwise GEMMs (A/B; set for preparation and layer alike)"},
      {"DMOE_MXFP8_FPROP_PER32", "1",
       "MXFP8 training: the FPROPs run the per-32 MXFP8 GEMM on exact row bundles (same prepared weights) instead of the FP8-blockwise FPROP at shared scales (A/B)"},
      {"DMOE_ORACLE_THREADS", "integer",
       "CPU oracle: threads of its grouped GEMMs (reference/parallel.h; the values do not depend on it); default the host's cores, at most 64"},
      {"DMOE_MXFP8_REROUND", "1",
       "MXFP8 training: the MXFP8 pipeline -- exact 1x32 / 32x1 activation blocks re-rounded at the shared scales before each FP8-blockwise GEMM (G149-G151) -- instead of the FP8-blockwise pipeline on activations quantized once at them (G152) (A/B)"},
      {"DMOE_MXFP8_WGRAD_BF16", "1",
       "MXFP8 training: the WGRADs on BF16 copies of the column bundles (exact products) instead of the FP8-blockwise WGRAD at shared scales (A/B)"},
      {"DMOE_MXFP8_NARROW_SPLIT", "0 | 1",
       "MXFP8 128x128 tiles of at most 64 expert rows: both warpgroups, a column slice each; 0: warpgroup 0 alone (A/B); default 1"},
  };
  return table;
}

const char* env_get(const char* name) {
  bool known = false;
  for (const EnvKnob& k : env_knobs()) known = known || std::strcmp(k.name, name) == 0;
  if (!known) detail::fail(ErrorCode::kInternal, "environment knob ", name, " is not in src/core/env_knobs.cpp");
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? nullptr : v;
}

bool env_flag(const char* name) {
  const char* v = env_get(name);
  return v != nullptr && v[0] != '0';
}

int64_t env_int64_or(const char* name, int64_t fallback) {
  const char* v = env_get(name);
  return v == nullptr ? fallback : std::strtoll(v, nullptr, 10);
}

}  // namespace dist_moe::core
