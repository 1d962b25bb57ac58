#pragma once
// --config FILE.toml: a file of flags, read strictly. Top-level `key = value` pairs only (the subset of
// TOML flags need: integers, numbers, true/false, quoted strings, comments), each key a
// long flag name of the command (`layers = 4`, `sequence-parallel = true`, `lr-schedule = "cosine"`).
// A syntax error, a duplicate key, a table, an array, a key that is not a flag, or a value of the
// wrong type is an error naming the file, the line and the key — never silently ignored.
#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

namespace lattice::cli {

// The file's settings as command-line arguments ("--layers", "4"), in file order, to be parsed
// before the real arguments so that those win. Throws InputError.
std::vector<std::string> config_file_args(const std::string& path, const CLI::App& app);

// Every setting of the parsed `app` as a file config_file_args reads back (--dump-config): the given
// values under the long names (flags as true/false), and the defaults as comments, so the file reads
// back as the same run; options with no value are left out.
// `derived`: options whose default another source replaces (train's --vocab: the data's), left out
// unless given.
// `taken`: settings a resume takes from its checkpoint (long name → TOML value), shown in place of the
// defaults where not given (commented out as those are, followed by `taken_from`).
std::string dump_config(const CLI::App& app, const std::vector<std::string>& derived = {},
                        const std::map<std::string, std::string>& taken = {}, const std::string& taken_from = "");
// The settings given (on the command line or by --config) as one line of flags: "--layers 6 --lr 0.003".
std::string given_flags(const CLI::App& app);

}  // namespace lattice::cli
