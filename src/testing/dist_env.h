// Child side of tools/launcher/dmoe_launch.cpp (dmoe_launch): the rank, world size and local rank
// the launcher put in the environment, and the exchange of an ncclUniqueId through a file in the
// launcher's bootstrap directory (rank 0 creates it, the others wait for it with a timeout).
// Header-only; used by the multi-GPU tests and the benchmarks. No CUDA call here: pick the device
// (cudaSetDevice) before creating communicators.
#pragma once

#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace dist_moe::testing {

struct DistEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string bootstrap_dir;  // empty when not started by dmoe_launch
  bool launched() const { return !bootstrap_dir.empty(); }
};

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::atoi(v);
}

inline DistEnv dist_env_from_environment() {
  DistEnv e;
  e.rank = env_int("DMOE_RANK", 0);
  e.world = env_int("DMOE_WORLD_SIZE", 1);
  e.local_rank = env_int("DMOE_LOCAL_RANK", e.rank);
  if (const char* d = std::getenv("DMOE_BOOTSTRAP_DIR")) e.bootstrap_dir = d;
  if (e.world < 1 || e.rank < 0 || e.rank >= e.world)
    throw std::runtime_error("bad DMOE_RANK / DMOE_WORLD_SIZE in the environment");
  if (e.world > 1 && e.bootstrap_dir.empty())
    throw std::runtime_error("DMOE_WORLD_SIZE > 1 but no DMOE_BOOTSTRAP_DIR: start this program through dmoe_launch");
  return e;
}

// All ranks call this with the same tag, in the same order. Rank 0 generates the id (ncclGetUniqueId)
// and publishes it atomically (write + rename); the others poll for the file up to timeout_s.
inline ncclUniqueId exchange_unique_id(const DistEnv& env, const std::string& tag, int timeout_s = 120) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (env.world == 1) {
    if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("ncclGetUniqueId failed");
    return id;
  }
  const std::string path = env.bootstrap_dir + "/nccl_id_" + tag;
  if (env.rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("ncclGetUniqueId failed");
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr || std::fwrite(&id, sizeof(id), 1, f) != 1 || std::fclose(f) != 0)
      throw std::runtime_error("cannot write " + tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp);
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const size_t n = std::fread(&id, sizeof(id), 1, f);
      std::fclose(f);
      if (n == 1) return id;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("rank " + std::to_string(env.rank) + " timed out after " + std::to_string(timeout_s) +
                               " s waiting for rank 0's NCCL unique id at " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace dist_moe::testing
