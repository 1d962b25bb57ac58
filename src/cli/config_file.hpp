#pragma once
// --config FILE.toml: a file of flags, read strictly. Top-level `key = value` pairs only (the subset of
// TOML flags need: integers, numbers, true/false, quoted strings, comments), each key a
// long flag name of the command (`layers = 4`, `sequence-parallel = true`, `lr-schedule = "cosine"`).
// A syntax error, a duplicate key, a table, an array, a key that is not a flag, or a value of the
// wrong type is an error naming the file, the line and the key — never silently ignored.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace lattice::cli {

// The file's settings as command-line arguments ("--layers", "4"), in file order, to be parsed
// before the real arguments so that those win. Throws InputError.
std::vector<std::string> config_file_args(const std::string& path, const CLI::App& app);

}  // namespace lattice::cli
