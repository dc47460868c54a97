// Sub-commands of the dist-moe tool. Each returns the process exit code; errors are thrown as
// dist_moe::Error and printed by main() as one line.
#pragma once

#include <string>
#include <vector>

#include "dist_moe/config.h"

namespace dist_moe::cli {

class Args;

int cmd_plan(const std::vector<std::string>& argv);
int cmd_demo(const std::vector<std::string>& argv);
int cmd_info(const std::vector<std::string>& argv);
int cmd_bench(const std::vector<std::string>& argv);
int cmd_bench_rank(const std::vector<std::string>& argv);  // one rank of `bench` (internal)

// Options shared by every command that builds a Config from the command line.
const std::vector<std::string>& config_valued_options();
const std::vector<std::string>& config_flag_options();
// Builds (and validates) a Config from --shape/--tokens/... ; sets *ep_size from --ep.
Config config_from_args(const Args& args, int64_t* ep_size);

}  // namespace dist_moe::cli
