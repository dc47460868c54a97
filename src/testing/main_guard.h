// main() of the benchmarks: an exception ends the program as one line on stderr that names it and
// a non-zero exit (2 for bad input, 1 otherwise), never std::terminate.
//
//   int main(int argc, char** argv) { return dist_moe::testing::guarded_main("bench_x", [&] { ...; return 0; }); }
#pragma once

#include <cstdio>
#include <exception>

#include "dist_moe/error.h"

namespace dist_moe::testing {

template <typename Body>
int guarded_main(const char* program, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fflush(stdout);  // what the program printed so far comes first
    const bool bad_input = e.code() == ErrorCode::kInvalidValue || e.code() == ErrorCode::kInvalidType;
    std::fprintf(stderr, "%s: error: %s%s\n", program, e.what(),
                 bad_input ? "" : " ('dist-moe info' shows the GPUs and the NCCL in use)");
    return bad_input ? 2 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace dist_moe::testing
