#include "cli/cli_util.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace lattice::cli {

std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help (or --version): print it, succeed
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');  // the one-line error contract
    const std::string command = argc > 0 ? argv[0] : app.get_name();
    std::fprintf(stderr, "lattice %s: error: %s\n", command.c_str(), message.c_str());
    return 2;
  }
}

}  // namespace lattice::cli
