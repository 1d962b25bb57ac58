#include "cli/config_file.hpp"

#include <toml++/toml.h>

#include <iomanip>
#include <sstream>
#include <string>

#include "core/error.hpp"

namespace lattice::cli {

namespace {
std::string shortest(double v) {  // round-trips
  std::ostringstream out;
  out << std::setprecision(17) << v;
  return out.str();
}
}  // namespace

std::vector<std::string> config_file_args(const std::string& path, const CLI::App& app) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    fail("config " + path + (where.line ? ":" + std::to_string(where.line) : std::string()) + ": " +
         std::string(e.description()));
  }
  std::vector<std::string> args;
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    const std::string at = "config " + path + ":" + std::to_string(node.source().begin.line) + ": " + name;
    const CLI::Option* opt = app.get_option_no_throw("--" + name);
    require(!node.is_table() && !node.is_array(), at + ": tables and arrays are not flags (write key = value)");
    require(opt != nullptr && name != "config" && name != "help",
            at + " is not a flag of " + app.get_name() + " (see --help)");
    const std::string type = opt->get_type_name();
    if (opt->get_expected_min() == 0) {  // a flag without a value
      require(node.is_boolean(), at + " takes true or false");
      if (node.as_boolean()->get()) args.push_back("--" + name);
      continue;
    }
    std::string value;
    if (type.find("INT") != std::string::npos) {
      require(node.is_integer(), at + " takes an integer");
      value = std::to_string(node.as_integer()->get());
    } else if (type.find("FLOAT") != std::string::npos) {
      require(node.is_integer() || node.is_floating_point(), at + " takes a number");
      value = node.is_integer() ? std::to_string(node.as_integer()->get())
                                : shortest(node.as_floating_point()->get());
    } else {
      require(node.is_string(), at + " takes a string (in quotes)");
      value = node.as_string()->get();
    }
    args.push_back("--" + name);
    args.push_back(value);
  }
  return args;
}

}  // namespace lattice::cli
