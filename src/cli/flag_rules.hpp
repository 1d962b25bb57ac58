#pragma once
// The rules every sub-command's flags obey where they are parsed (parse_flags, cli/cli_util.hpp):
// one table of numeric bounds, a flag given twice with two values refused, and the pairs of flags
// that contradict each other refused in one line naming both (docs/design.md, "Flag rules").
#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace lattice::cli {

// The values a numeric flag accepts: [lo, hi] (an end open when lo_open / hi_open), and 0 as well
// when zero_is_off (0 = off or "the default"). `command` empty: every command with the flag.
struct FlagBound {
  std::string_view command;  // "train", "plan", ...; empty: any
  std::string_view flag;     // the long name, without dashes
  long double lo, hi;
  bool lo_open = false, hi_open = false, zero_is_off = false;
  std::string_view hi_text = {};  // how the upper bound is written ("2^40"); empty: the number
};

// Every numeric flag of every command, once.
const std::vector<FlagBound>& flag_bounds();
// The bound of `flag` in `command` (a command's own entry first), or null.
const FlagBound* find_flag_bound(std::string_view command, std::string_view flag);
// "" when `value` (as given) is within the bound, else the one-line message naming flag, value and
// range (`integers`: the flag takes whole numbers).
std::string bound_violation(const FlagBound& bound, const std::string& value, bool integers);

// After parsing: every given numeric value within its bound (InputError), and every numeric option of
// `app` listed in the table (std::logic_error: a flag added without its bound).
void check_flag_bounds(const CLI::App& app, std::string_view command);
// Before parsing, on the command line's own arguments: a path flag (or two of its aliases) given twice
// with different values is refused (InputError); the same value twice is harmless, and other flags
// keep "the last one wins" (a script's settings overridden by hand).
void check_repeated_flags(const CLI::App& app, const std::vector<std::string>& args);
// After parsing: pairs of flags that contradict, or a flag the rest of the line makes ignored.
void check_flag_conflicts(const CLI::App& app, std::string_view command);

}  // namespace lattice::cli
