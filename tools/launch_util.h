// Starting multi-GPU jobs from the CLI: one process per GPU through dmoe_launch, without touching
// CUDA in this process.
#pragma once

#include <string>
#include <vector>

namespace dist_moe::cli {

int count_nvidia_gpus();        // entries under /proc/driver/nvidia/gpus (no CUDA call)
std::string self_dir();         // directory of the running dist-moe binary
std::string launcher_path();    // dmoe_launch (throws kRuntime when it was not built)
// Runs `cmd` (through the shell), echoing its output when `echo`; lines starting with `tag` (after
// an optional "[rank 0] ") are collected without the tag instead. Returns the exit status.
int run_and_collect(const std::string& cmd, const std::string& tag, std::vector<std::string>* tagged, bool echo);

}  // namespace dist_moe::cli
