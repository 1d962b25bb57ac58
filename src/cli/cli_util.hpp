#pragma once
// Shared flag parsing for the sub-commands: CLI11 errors become one stderr line and exit 2.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace lattice::cli {

// Parses argv (argv[0] is the sub-command's name) into `app`. Returns an exit status when the
// command must stop here: 0 after --help was printed, 2 after a usage error was reported as one
// line "lattice <command>: error: <message>" on stderr. Returns nullopt when the command should run.
std::optional<int> parse_flags(CLI::App& app, int argc, char** argv);

// --overwrite, the same on every command that writes a file (core/output_path.hpp's rule (c)).
void add_overwrite_flag(CLI::App& app, bool& overwrite);

// Bytes of a token directory's train.bin and val.bin (those that exist): what a run holds in its
// data category, for the planner's per-category prediction.
int64_t token_file_bytes(const std::string& dir);

}  // namespace lattice::cli
