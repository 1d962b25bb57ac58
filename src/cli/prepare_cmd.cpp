// Placeholder until the prepare command lands (being written now).
#include <cstdio>
#include "cli/commands.hpp"
namespace lattice::cli {
int run_prepare(int, char**) { std::fprintf(stderr, "lattice prepare: not built yet\n"); return 1; }
}  // namespace lattice::cli
