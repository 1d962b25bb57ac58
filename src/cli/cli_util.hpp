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

// Bad input found before MPI starts on a rank other than 0 of a launched job: every rank parses the
// same flags, so rank 0 reports the same line and its exit makes the launcher end the job. This rank
// waits for that, and, still alive after it (rank 0's flags were good: other flags on this rank),
// reports its own line naming its rank. Returns the exit status.
int report_after_rank0(const std::string& command, const std::string& message, int status);

// A command that runs as one process (eval, sample) started by a launcher with more ranks: each rank
// would print the whole result, interleaved. Refused in one line (rank 0's; the others wait for it);
// returns the exit status, or nullopt when the command may run.
std::optional<int> refuse_several_ranks(const std::string& command);

// Whether a flag (an option taking no value) is on: given as --flag or --flag=true, not --flag=false
// (CLI11 counts that as given and keeps its text; the flag's callback ran only for a true value).
inline bool flag_on(const CLI::Option* opt) { return opt && opt->count() > 0 && opt->as<bool>(); }

// --overwrite, the same on every command that writes a file (core/output_path.hpp's rule (c)).
void add_overwrite_flag(CLI::App& app, bool& overwrite);

// Bytes of a token directory's train.bin and val.bin (those that exist): what a run holds in its
// data category, for the planner's per-category prediction.
int64_t token_file_bytes(const std::string& dir);

}  // namespace lattice::cli
