#include "dist_moe/nccl_version.h"

namespace dist_moe {
namespace {

struct Parts {
  int major, minor, patch;
};

Parts split(int code) {
  if (code >= 10000) return {code / 10000, code % 10000 / 100, code % 100};
  return {code / 1000, code % 1000 / 100, code % 100};
}

}  // namespace

std::string nccl_version_string(int code) {
  if (code <= 0) return "of unknown version";
  const Parts p = split(code);
  return std::to_string(p.major) + "." + std::to_string(p.minor) + "." + std::to_string(p.patch);
}

std::string nccl_version_problem(int built, int loaded, int minimum) {
  if (loaded <= 0) return "unusable (ncclGetVersion failed)";
  if (loaded < minimum) return "older than " + nccl_version_string(minimum) + ", the first with the device API we use";
  if (loaded < built) return "older than the headers we were compiled against (" + nccl_version_string(built) + ")";
  const Parts l = split(loaded), b = split(built);
  if (l.major != b.major || l.minor != b.minor)
    return "a different release than the headers we were compiled against (" + nccl_version_string(built) +
           "): the device API's structures differ between releases";
  return "";
}

}  // namespace dist_moe
