#pragma once
// The rules every sub-command's flags obey where they are parsed (parse_flags, cli/cli_util.hpp):
// one table of numeric bounds, a flag given twice with two values refused, and the pairs of flags
// that contradict each other refused in one line naming both (docs/design.md, "Flag rules").
#include <CLI/CLI.hpp>
#include <optional>
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
  std::string_view word = {};     // a word the flag takes besides numbers (--save-every auto); empty: none
};

// A duration as --mtbf takes it: seconds, or a number followed by s, m, h or d ("90m", "6h", "1.5d",
// "45s", "5400"), in seconds; nullopt when the text is none of these. Its range is the flag table's
// (a flag of type DURATION is bounded in seconds).
std::optional<double> parse_duration(const std::string& text);
// Whether `value` is the word some command's --`flag` takes besides numbers (a --config file may
// give it as a string where the flag otherwise takes an integer).
bool flag_word(std::string_view flag, const std::string& value);

// Every numeric flag of every command, once.
const std::vector<FlagBound>& flag_bounds();
// The bound of `flag` in `command` (a command's own entry first), or null.
const FlagBound* find_flag_bound(std::string_view command, std::string_view flag);
// A bound as the messages write it: a whole number in digits, else short ("1e6", "0.001").
std::string number_text(long double v);
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
// Before parsing, on every value a numeric flag is given (the command line's and --config's), in
// place: an integer is read as the decimal number a person wrote. CLI11 alone read "010" as octal 8
// (and bounds-checked it as 10), and "0x10" was dumped by --dump-config as a value --config refuses:
// each integer is rewritten in plain decimal ("010" → "10", "+4" → "4", "0x10" → "16"), a hex float
// in decimal. A value that is no number at all is a usage error naming the flag and what it takes
// ("--layers takes a whole number between 1 and 10000 (got 1e3)"); a whole number past what the flag
// can hold is refused as its bound (InputError with `usage` false) before CLI11 could say only
// "Could not convert".
struct NumberError {
  std::string message;
  bool usage = true;  // exit 2; else an invalid value (exit 1), as the bounds
};
std::optional<NumberError> canonical_numbers(const CLI::App& app, std::vector<std::string>& args,
                                             std::string_view command);
// After parsing: pairs of flags that contradict, or a flag the rest of the line makes ignored.
void check_flag_conflicts(const CLI::App& app, std::string_view command);

}  // namespace lattice::cli
