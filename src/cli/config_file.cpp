// The --config reader (config_file.hpp): the `key = value` subset of TOML that flags need, parsed
// here line by line (a general TOML library brought assertion failures on malformed input, found
// by fuzzing). Anything outside the subset — tables, arrays, inline tables, dotted keys, multi-line
// strings — is an error naming the line, never a guess. A quoted key ("steps" = 2) is its bare key.
#include "cli/config_file.hpp"
#include "cli/cli_util.hpp"

#include <algorithm>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>

#include "cli/flag_rules.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

namespace lattice::cli {

namespace {

// A config key longer than any flag name, or a value longer than any path or list a flag takes, is
// refused as such (a 200 MB key once became a 200 MB error line).
constexpr size_t kLongestKey = 64, kLongestValue = 65536;  // a recompute plan of 10,000 layers fits
// A token as an error line quotes it: its first kLongestKey characters.
std::string quoted(const std::string& token) {
  if (token.size() <= kLongestKey) return token;
  std::string cut = token.substr(0, kLongestKey);
  cut.append("...");  // appended, not `substr + "..."`: GCC 12 misreads that (-Wrestrict)
  return cut;
}


enum class Kind { boolean, integer, number, string };
struct Value {
  Kind kind;
  std::string text;  // as the flag will read it
};

bool bare_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// A quoted string starting at s[i] (after the quote); returns its value, i past the closing quote.
std::string quoted(const std::string& s, size_t& i, char quote, const std::string& at) {
  std::string out;
  while (i < s.size() && s[i] != quote) {
    char c = s[i++];
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') fail(at + ": a control character in a string");
    if (c == '\\' && quote == '"') {
      require(i < s.size(), at + ": a string ends in a backslash");
      switch (s[i++]) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'u':
        case 'U': {  // \uXXXX, \UXXXXXXXX: a code point, written as UTF-8
          const size_t n = s[i - 1] == 'u' ? 4 : 8;
          require(i + n <= s.size() && s.substr(i, n).find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
                  at + ": a \\u escape needs " + std::to_string(n) + " hex digits");
          const unsigned long cp = std::stoul(s.substr(i, n), nullptr, 16);
          i += n;
          require(cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF), at + ": a \\u escape outside Unicode");
          if (cp < 0x80) {
            out += char(cp);
          } else if (cp < 0x800) {
            out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
          } else {
            out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
            out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
          }
          continue;
        }
        default: fail(at + ": an escape other than \\\" \\\\ \\n \\t \\u in a string");
      }
    }
    out += c;
  }
  require(i < s.size(), at + ": a string without its closing quote (multi-line strings are not flags)");
  ++i;
  return out;
}

Value parse_value(const std::string& s, size_t& i, const std::string& at) {
  require(i < s.size() && s[i] != '#', at + ": a key without a value");
  const char c = s[i];
  if (c == '"' || c == '\'') {
    require(s.compare(i, 3, std::string(3, c)) != 0, at + ": multi-line strings are not flags");
    ++i;
    return {Kind::string, quoted(s, i, c, at)};
  }
  require(c != '[' && c != '{', at + ": tables and arrays are not flags (write key = value)");
  size_t end = i;
  while (end < s.size() && s[end] != ' ' && s[end] != '\t' && s[end] != '#') ++end;
  const std::string token = s.substr(i, end - i);
  i = end;
  if (token == "true" || token == "false") return {Kind::boolean, token};
  std::string digits;  // TOML allows 1_000
  for (size_t k = 0; k < token.size(); ++k)
    if (token[k] != '_' || k == 0 || k + 1 == token.size()) digits += token[k];
  char* stop = nullptr;
  errno = 0;
  (void)std::strtoll(digits.c_str(), &stop, 10);
  if (!digits.empty() && *stop == '\0' && errno == 0) return {Kind::integer, digits};
  if (errno == ERANGE && digits[0] != '-') {  // past TOML's int64 but a flag's uint64 (--seed)
    errno = 0;
    (void)std::strtoull(digits.c_str(), &stop, 10);
    if (*stop == '\0' && errno == 0) return {Kind::integer, digits};
  }
  require(errno != ERANGE || digits.find_first_of(".eE") != std::string::npos,
          at + ": " + quoted(token) + " is out of range");
  errno = 0;
  (void)std::strtod(digits.c_str(), &stop);
  const bool number = !digits.empty() && *stop == '\0' && digits.find_first_of("xX") == std::string::npos;
  require(number, at + ": '" + quoted(token) + "' is not a value (strings go in quotes)");
  // TOML's decimal point has a digit on each side (.5 and 5. are not TOML, though strtod reads them).
  for (size_t k = digits.find('.'); k != std::string::npos; k = digits.find('.', k + 1))
    require(k > 0 && k + 1 < digits.size() && std::isdigit(static_cast<unsigned char>(digits[k - 1])) &&
                std::isdigit(static_cast<unsigned char>(digits[k + 1])),
            at + ": '" + quoted(token) + "' is not a TOML number (a digit on each side of the point: 0.5, 5.0)");
  return {Kind::number, digits};
}

}  // namespace

std::vector<std::string> config_file_args(const std::string& path, const CLI::App& app) {
  require_regular_file(path, "config");
  std::ifstream in(path, std::ios::binary);
  require(in.good(), "config " + path + ": cannot read it");
  std::map<std::string, int> seen;  // key → line
  std::map<const CLI::Option*, std::string> keys;  // flag → the key that set it
  std::vector<std::string> args;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = "config " + path + ":" + std::to_string(number);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
    // TOML allows no NUL byte; after a bare value one was passed on, and the flag's message cut at it.
    require(line.find('\0') == std::string::npos, where + ": a NUL byte (TOML is text; write \\u0000 in a string)");
    size_t i = 0;
    auto skip_blanks = [&] {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    };
    skip_blanks();
    if (i == line.size() || line[i] == '#') continue;
    require(line[i] != '[', where + ": tables are not flags (write key = value at the top level)");
    std::string key;
    if (line[i] == '"' || line[i] == '\'') {  // a quoted key names the flag as the bare one does
      const char quote = line[i++];
      key = quoted(line, i, quote, where);
      std::string shown = (quoted)(key);  // one line: control bytes (a \n, an escape) not echoed
      for (char& c : shown)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
      require(!key.empty() && std::all_of(key.begin(), key.end(), bare_key_char),
              where + ": the quoted key \"" + shown + "\" is not a flag of " + app.get_name() + " (see --help)");
    } else {
      const size_t key_begin = i;
      while (i < line.size() && bare_key_char(line[i])) ++i;
      key = line.substr(key_begin, i - key_begin);
    }
    require(!key.empty(), where + ": expected key = value");
    // No flag's name is this long: said without echoing a key of any size into one line.
    require(key.size() <= kLongestKey, where + ": a key of " + std::to_string(key.size()) +
                                           " characters is not a flag of " + app.get_name() + " (see --help)");
    const std::string at = where + ": " + key;
    skip_blanks();
    require(i < line.size(), at + ": a key without a value (write key = value)");
    require(line[i] != '.', at + ": dotted keys (tables) are not flags");
    require(line[i] == '=', where + ": expected key = value");
    ++i;
    skip_blanks();
    const Value value = parse_value(line, i, at);
    require(value.text.size() <= kLongestValue, at + ": a value of " + std::to_string(value.text.size()) +
                                                    " bytes (no flag takes more than " +
                                                    std::to_string(kLongestValue) + ")");
    skip_blanks();
    require(i == line.size() || line[i] == '#', at + ": something follows the value");
    const auto [it, fresh] = seen.emplace(key, number);
    require(fresh, at + " is defined twice (first on line " + std::to_string(it->second) + ")");

    const CLI::Option* opt = app.get_option_no_throw("--" + key);
    // --dump-config in a file would make every run of it print the file and stop.
    require(opt != nullptr, at + " is not a flag of " + app.get_name() + " (see --help)");
    require(key != "config" && key != "help" && key != "dump-config",
            at + ": --" + key + " is given on the command line, not in a config file");
    // A key and its alias (layers, num-layers) name one flag: which should win is anyone's guess.
    const auto [alias, first] = keys.emplace(opt, key);
    require(first, at + " and " + alias->second + " (line " + std::to_string(seen[alias->second]) +
                       ") are one flag: give it once");
    const std::string type = opt->get_type_name();
    if (opt->get_expected_min() == 0) {  // a flag without a value
      require(value.kind == Kind::boolean, at + " takes true or false");
      if (value.text == "true") args.push_back("--" + key);
      continue;
    }
    if (type.find("INT") != std::string::npos) {
      require(value.kind == Kind::integer || (value.kind == Kind::string && flag_word(key, value.text)),
              at + " takes an integer");
    } else if (type == "DURATION") {  // seconds as a number, or a string with its unit ("90m")
      require(value.kind == Kind::integer || value.kind == Kind::number || (value.kind == Kind::string && !value.text.empty()),
              at + " takes a duration (seconds, or a string such as \"90m\")");
    } else if (type.find("FLOAT") != std::string::npos) {
      require(value.kind == Kind::integer || value.kind == Kind::number, at + " takes a number");
    } else {
      require(value.kind == Kind::string, at + " takes a string (in quotes)");
      // As on the command line: an empty value is never what was meant (an empty save = "" ran
      // without saving), and a NUL cannot be in a flag's value (a path "a\u0000b" was cut to "a").
      require(!value.text.empty(), at + ": an empty value");
      require(value.text.find('\0') == std::string::npos, at + ": a NUL character (\\u0000) cannot be in a flag's value");
    }
    args.push_back("--" + key);
    args.push_back(value.text);
  }
  require(!in.bad(), "config " + path + ": cannot read it");
  return args;
}

namespace {
bool skipped(const std::string& key) { return key == "help" || key == "config" || key == "dump-config"; }
std::string value_of(const CLI::Option* opt) {
  if (opt->count() == 0) return opt->get_default_str();
  const std::vector<std::string>& given = opt->results();
  return given.empty() ? std::string() : given.back();
}
}  // namespace

std::string dump_config(const CLI::App& app, const std::vector<std::string>& derived,
                        const std::map<std::string, std::string>& taken, const std::string& taken_from) {
  std::string out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty() || skipped(opt->get_lnames().front())) continue;
    if (opt->get_group().empty()) continue;  // a hidden flag (lattice launch's relaunch): not the run's to repeat
    const std::string key = opt->get_lnames().front();
    const bool given = opt->count() > 0;
    // What the run takes, not the default; commented out as defaults are: not given, the resume takes it.
    if (const auto it = taken.find(key); !given && it != taken.end()) {
      out += "# " + key + " = " + it->second + "  (" + taken_from + ")\n";
      continue;
    }
    if (!given && std::find(derived.begin(), derived.end(), key) != derived.end()) continue;
    std::string value;
    if (opt->get_expected_min() == 0) {  // a flag
      value = flag_on(opt) ? "true" : "false";
    } else {
      value = value_of(opt);
      if (value.empty()) continue;
      const std::string type = opt->get_type_name();
      const bool number = (type.find("INT") != std::string::npos || type.find("FLOAT") != std::string::npos) &&
                          !flag_word(key, value);  // save-every = "auto"
      if (!number) {
        // Escaped as the reader unescapes them, so any value (a path with a newline) reads back.
        std::string quoted = "\"";
        for (char c : value) {
          if (c == '\n') {
            quoted += "\\n";
          } else if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
            char code[8];
            std::snprintf(code, sizeof code, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
            quoted += code;
          } else {
            if (c == '"' || c == '\\') quoted += '\\';
            quoted += c;
          }
        }
        value = quoted + "\"";
      }
    }
    // Defaults are written commented out: the file reads back as the same run, and shows the rest.
    out += (given ? "" : "# ") + key + " = " + value + "\n";
  }
  return out;
}

std::string given_flags(const CLI::App& app) {
  std::string out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty() || skipped(opt->get_lnames().front())) continue;
    out += (out.empty() ? "--" : " --") + opt->get_lnames().front();
    if (opt->get_expected_min() == 0) {
      if (!flag_on(opt)) out += "=false";
      continue;
    }
    const std::string value = value_of(opt);
    const bool plain = !value.empty() && value.find_first_of(" \t\"'\\$`;&|<>()*?![]{}#~") == std::string::npos;
    out += " " + (plain ? value : "'" + value + "'");
  }
  return out;
}

}  // namespace lattice::cli
