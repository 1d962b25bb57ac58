#include "plan/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.hpp"

namespace lattice::plan {

namespace {

// Splits "80GiB" into 80 and "gib"; fails unless the number is finite and positive.
double leading_number(const std::string& text, const std::string& flag, std::string& unit) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  const std::string wanted = flag + " must be a positive number with an optional unit (got '" + text + "')";
  if (end == begin) throw UsageError(wanted);  // not a number: usage, exit 2
  require(std::isfinite(v) && v > 0, wanted);  // a number out of bounds (0, -1, inf): exit 1
  unit.clear();
  for (const char* c = end; *c; ++c)
    if (!std::isspace(static_cast<unsigned char>(*c))) unit += char(std::tolower(static_cast<unsigned char>(*c)));
  return v;
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  std::string unit;
  const double v = leading_number(text, flag, unit);
  struct Unit { const char* name; double scale; };
  static const Unit units[] = {{"", 1},        {"b", 1},          {"kb", 1e3},        {"mb", 1e6},
                               {"gb", 1e9},    {"tb", 1e12},      {"kib", 1024.0},    {"mib", 1048576.0},
                               {"gib", 1073741824.0}, {"tib", 1099511627776.0}, {"pb", 1e15},
                               {"eb", 1e18},   {"pib", 1125899906842624.0}, {"eib", 1152921504606846976.0}};
  for (const Unit& u : units)
    if (unit == u.name) {
      // Past 1 EiB is no machine's memory, and past 2^63 the conversion would overflow.
      require(v * u.scale <= 1152921504606846976.0, flag + " must be at most 1 EiB (got '" + text + "')");
      return int64_t(std::llround(v * u.scale));
    }
  throw UsageError(flag + " has an unknown unit '" + unit +
                   "' (use B, kB, MB, GB, TB, PB, EB, KiB, MiB, GiB, TiB, PiB or EiB)");
}

double parse_rate(const std::string& text, const std::string& flag) {
  std::string unit;
  const double v = leading_number(text, flag, unit);
  if (unit.empty()) return v;
  if (unit == "g") return v * 1e9;
  if (unit == "t") return v * 1e12;
  if (unit == "p") return v * 1e15;
  throw UsageError(flag + " has an unknown suffix '" + unit + "' (use G, T or P, or a plain number)");
}

}  // namespace lattice::plan
