// The benchmarks' command lines, walked one way: `--flag value` options and `--flag` switches,
// -h/--help prints the usage to stdout (exit 0), an unknown flag prints it to stderr (exit 2), a
// flag without its value is one line on stderr (exit 2).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace dist_moe::testing {

// Calls handle(flag, value) for every argument; value() consumes and returns the next one.
// handle returns false for a flag it does not know. Returns -1 when the whole line was taken
// (the benchmark goes on), otherwise the exit code.
template <class Handle>
int walk_bench_args(int argc, char** argv, const char* usage, Handle handle) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag != "-h" && flag != "--help" && handle(flag, value)) continue;
    const bool help = flag == "-h" || flag == "--help";
    std::fprintf(help ? stdout : stderr, "usage: %s %s\n", argv[0], usage);
    return help ? 0 : 2;
  }
  return -1;
}

}  // namespace dist_moe::testing
