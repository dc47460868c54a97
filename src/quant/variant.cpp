// The kernel variant under A/B measurement (quantize.h).
#include <atomic>

#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

std::atomic<Variant> g_variant{Variant::kNew};

}  // namespace

Variant variant() { return g_variant.load(std::memory_order_relaxed); }
void set_variant(Variant v) { g_variant.store(v, std::memory_order_relaxed); }

}  // namespace dist_moe::quant
