// started_by_launcher, launcher_rank and launcher_size (comm/distributed.hpp): what mpirun's
// environment says, read without MPI, so the command-line layer (and the parser fuzzers, which link
// no MPI) can ask it.
#include <algorithm>
#include <cstdlib>

#include "comm/distributed.hpp"

namespace lattice::comm {

namespace {
const char* launcher_env(const char* const* names) {
  for (const char* const* n = names; *n; ++n)
    if (const char* value = std::getenv(*n)) return value;
  return nullptr;
}

constexpr const char* kRankVars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", nullptr};
constexpr const char* kSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", nullptr};
}  // namespace

bool started_by_launcher() { return launcher_env(kSizeVars) != nullptr || launcher_env(kRankVars) != nullptr; }

int launcher_rank() {
  const char* value = launcher_env(kRankVars);
  return value ? std::atoi(value) : 0;
}

int launcher_size() {
  const char* value = launcher_env(kSizeVars);
  return value ? std::max(1, std::atoi(value)) : 1;
}

}  // namespace lattice::comm
