#include "debug_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "dist_moe/error.h"

namespace dist_moe::core {

std::vector<StageDelay> parse_stage_delays(const char* text, int rank) {
  std::vector<StageDelay> out;
  if (text == nullptr || *text == '\0') return out;
  const std::string list(text);
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, end - pos);
    auto bad = [&item]() {
      detail::fail(ErrorCode::kInvalidValue, "DMOE_DEBUG_STAGE_DELAY entry '", item,
                   "' is not rank:stage:microseconds");
    };
    const size_t a = item.find(':'), b = item.rfind(':');
    if (a == std::string::npos || b == a || b == a + 1) bad();
    const std::string rank_s = item.substr(0, a), us_s = item.substr(b + 1);
    char* rank_end = nullptr;
    char* us_end = nullptr;
    errno = 0;
    const long r = std::strtol(rank_s.c_str(), &rank_end, 10);
    const double us = std::strtod(us_s.c_str(), &us_end);
    if (rank_s.empty() || us_s.empty() || *rank_end != '\0' || *us_end != '\0' || errno != 0 || r < 0 ||
        !(us >= 0.0))
      bad();
    if (r == rank) out.push_back({item.substr(a + 1, b - a - 1), static_cast<int64_t>(us * 1000.0)});
    pos = end + 1;
  }
  return out;
}

}  // namespace dist_moe::core
