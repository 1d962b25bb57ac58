// Placeholder until the plan command lands (being written now).
#include <cstdio>
#include "cli/commands.hpp"
namespace lattice::cli {
int run_plan(int, char**) { std::fprintf(stderr, "lattice plan: not built yet\n"); return 1; }
}  // namespace lattice::cli
