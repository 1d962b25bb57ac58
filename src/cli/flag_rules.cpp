// The flag rules (cli/flag_rules.hpp): the bounds table, repeated flags, contradicting pairs.
#include "cli/flag_rules.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <optional>
#include <stdexcept>

#include "cli/cli_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "cli/model_flags.hpp"
#include "core/config.hpp"
#include "core/error.hpp"

namespace lattice::cli {

namespace {
constexpr long double k2(int e) { return e == 0 ? 1.0L : 2.0L * k2(e - 1); }
}  // namespace

const std::vector<FlagBound>& flag_bounds() {
  // Bounds: what the engine and the planner compute with (core/config.hpp's shape bounds keep every
  // size in 64 bits), or past any real use where the engine has no limit (a learning rate of 1e6).
  static const std::vector<FlagBound> table = {
      // The model (add_model_flags): every command that takes it.
      {"", "layers", 1, 10000},
      {"", "hidden", 1, k2(20)},
      {"", "heads", 1, k2(20)},
      {"", "seq-len", 1, k2(20)},
      {"", "vocab", 2, kMaxVocab, false, false, false, "2^20"},  // train, eval, sample: 65536 (require_token_vocab)
      {"", "dropout", 0, 1, false, true},
      {"", "num-experts", 0, 65536},
      {"", "moe-layer-freq", 1, 10000},
      {"", "moe-router-topk", 1, 65536},
      {"", "moe-ffn-hidden-size", 1, k2(22)},
      {"", "moe-expert-capacity-factor", 0, 1e4},
      {"", "moe-aux-loss-coeff", 0, 1e3},
      {"", "moe-groups", 1, k2(20)},
      {"", "expert-dropout", 0, 1, false, true},
      {"", "moe-init-scale", 0, 100, true},
      // The layout (add_layout_flags).
      {"", "recompute-layers", 0, 10000},
      {"", "tensor-model-parallel-size", 1, k2(20)},
      {"", "pipeline-model-parallel-size", 1, k2(20)},
      {"", "virtual-stages", 1, 1024},
      // Not given: even stages. Given, a stage of at least one layer (0 read as not given, silently).
      {"", "decoder-first-pipeline-num-layers", 1, 10000},
      {"", "decoder-last-pipeline-num-layers", 1, 10000},
      {"", "zero", 0, 3},
      {"", "expert-model-parallel-size", 1, k2(20)},
      {"", "context-parallel-size", 1, k2(20)},
      // Training (add_train_flags).
      {"train", "steps", 0, k2(40), false, false, false, "2^40"},
      {"train", "micro-batch", 1, k2(20), false, false, false, "2^20"},
      {"train", "global-batch", 1, k2(20), false, false, false, "2^20"},
      {"train", "lr", 0, 1e12},  // hostile tests explode a run with 1e9
      {"train", "min-lr", 0, 1e12},
      {"train", "warmup", 0, k2(40), false, false, false, "2^40"},
      {"train", "beta1", 0, 1, false, true},
      {"train", "beta2", 0, 1, false, true},
      {"train", "eps", 0, 1, true},
      {"train", "weight-decay", 0, 100},
      {"train", "initial-loss-scale", 1, k2(32), false, false, false, "2^32"},
      {"train", "loss-scale-window", 1, k2(40), false, false, false, "2^40"},
      {"train", "clip-grad", 0, 1e9},
      {"", "seed", 0, 18446744073709551615.0L, false, false, false, "2^64 - 1"},
      {"train", "save-every", 0, k2(40), false, false, false, "2^40", "auto"},
      // Seconds; beyond ten years no run is planned around its failures.
      {"train", "mtbf", 0, 10 * 365.25 * 86400, true},
      {"train", "eval-every", 0, k2(40), false, false, false, "2^40"},
      {"train", "eval-batches", 1, k2(20), false, false, false, "2^20"},
      // MFU against a peak below a MFLOP/s or above an EFLOP/s is a typo (1e-300 printed MFU inf%).
      {"train", "peak-flops", 1e6, 1e18},
      {"train", "threads", 0, 4096},  // 0: all cores
      // A timeout under a millisecond would stop every job at its first collective; 0 turns it off.
      {"train", "comm-timeout", 1e-3, 1e6, false, false, true},
      // A share above the peers' median: 0 would name every rank at the first noise, 1000x is no
      // straggler but a stopped rank (the comm timeout's business).
      {"train", "straggler-threshold", 0, 1000, true},
      // eval, sample.
      {"eval", "batches", 1, k2(30), false, false, false, "2^30"},
      {"eval", "micro-batch", 1, k2(20), false, false, false, "2^20"},
      {"sample", "tokens", 0, k2(24), false, false, false, "2^24"},
      {"sample", "temperature", 0, 1e6, true},
      {"sample", "top-k", 0, 65536},  // 0: all
      // plan.
      {"launch", "min-ranks", 1, k2(20), false, false, false, "2^20"},
      {"launch", "max-restarts", 0, 10000},
      {"launch", "no-progress-timeout", 1, 1e6, false, false, true},
      {"launch", "probe-timeout", 1, 3600},
      {"plan", "micro-batch", 1, k2(20), false, false, false, "2^20"},
      {"plan", "global-batch", 1, k2(30), false, false, false, "2^30"},
      {"plan", "gpus", 1, k2(20), false, false, false, "2^20"},
      // A measured iteration under a microsecond is a typo (1e-300 printed a 300-digit MFU); 0: none given.
      {"plan", "iteration-time", 1e-6, 1e9, false, false, true},
      {"plan", "threads", 1, 4096},
      {"plan", "top", 1, 10000},
      // bench.
      {"bench", "seconds", 0, 60, true},
      {"bench", "budget", 0, 60, true},
      {"bench", "threads", 0, 4096},
      {"eval", "threads", 0, 4096},  // 0: all cores
      {"sample", "threads", 0, 4096},
      {"bench", "micro-batch", 1, 4096},
      {"bench", "tp-share", 1, 1024},
      // groups, schedule, prepare.
      {"groups", "world", 1, k2(20), false, false, false, "2^20"},
      {"schedule", "pipeline-model-parallel-size", 1, 4096},
      {"schedule", "micro-batches", 1, k2(20), false, false, false, "2^20"},
      {"schedule", "virtual-stages", 1, 1024},
      {"schedule", "steps", 1, 1000},
      {"schedule", "forward-time", 0, 1e12},
      {"schedule", "backward-time", 0, 1e12},
      {"schedule", "weight-time", 0, 1e12},
      {"schedule", "p2p-latency", 0, 1e12},
      {"schedule", "head-time", 0, 1e12},
      {"schedule", "trace-step", 0, k2(31) - 1, false, false, false, "2^31 - 1"},  // held in an int
      {"prepare", "vocab-size", 300, 65536},
  };
  return table;
}

std::optional<double> parse_duration(const std::string& text) {
  if (text.empty() || text.find_first_of(" \t") != std::string::npos) return std::nullopt;
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  const std::string unit(end);
  double scale = 1;
  if (unit == "m") scale = 60;
  else if (unit == "h") scale = 3600;
  else if (unit == "d") scale = 86400;
  else if (!unit.empty() && unit != "s") return std::nullopt;
  // A hex or an exponent with a unit reads oddly but is still a number of units; inf and nan pass
  // here and are refused by the bound.
  return v * scale;
}

bool flag_word(std::string_view flag, const std::string& value) {
  for (const FlagBound& b : flag_bounds())
    if (b.flag == flag && !b.word.empty() && b.word == value) return true;
  return false;
}

const FlagBound* find_flag_bound(std::string_view command, std::string_view flag) {
  const FlagBound* any = nullptr;
  for (const FlagBound& b : flag_bounds()) {
    if (b.flag != flag) continue;
    if (b.command == command) return &b;
    if (b.command.empty()) any = &b;
  }
  return any;
}

std::string number_text(long double v) {
  char text[48];
  if (v == std::floor(v) && std::fabs(v) < 1e9L) {
    std::snprintf(text, sizeof text, "%.0Lf", v);
    return text;
  }
  std::snprintf(text, sizeof text, "%.6Lg", v);
  std::string s = text;
  for (const char* from : {"e+0", "e+", "e-0"}) {  // 1e+06 → 1e6, 1e-03 → 1e-3
    const size_t at = s.find(from);
    if (at != std::string::npos) {
      s.replace(at, std::string(from).size(), std::string(from) == "e-0" ? "e-" : "e");
      break;
    }
  }
  return s;
}

std::string bound_violation(const FlagBound& b, const std::string& value, bool integers) {
  char* end = nullptr;
  const long double v = std::strtold(value.c_str(), &end);
  const bool parsed = !value.empty() && end && *end == '\0';
  // The lower end compared as the double the flag becomes: "0.001" as a long double is just below the
  // double 1e-3 the table holds, and would be refused at the very bound it names.
  const double as_double = double(v), lo_bound = double(b.lo);
  const bool within = parsed && std::isfinite(v) && (b.lo_open ? as_double > lo_bound : as_double >= lo_bound) &&
                      (b.hi_open ? v < b.hi : v <= b.hi);
  if (within || (parsed && b.zero_is_off && v == 0)) return "";
  const std::string lo = number_text(b.lo), hi = b.hi_text.empty() ? number_text(b.hi) : std::string(b.hi_text);
  std::string range = integers ? "between " + lo + " and " + hi
                               : std::string("a finite number in ") + (b.lo_open ? "(" : "[") + lo + ", " + hi +
                                     (b.hi_open ? ")" : "]");
  if (b.zero_is_off) range = "0 (off) or " + range;
  return "--" + std::string(b.flag) + " must be " + range + " (got " + value + ")";
}

namespace {
// The digits of a whole number written as a person writes one: optional blanks before, a sign, then
// decimal digits or 0x and hex digits. Returns the value (long double: 2^64 and beyond still compare
// against a bound), or nullopt when the text is something else.
std::optional<long double> whole_number(const std::string& text, std::string& canonical) {
  size_t i = text.find_first_not_of(" \t");
  if (i == std::string::npos) return std::nullopt;
  bool negative = false;
  if (text[i] == '+' || text[i] == '-') negative = text[i++] == '-';
  const bool hex = text.compare(i, 2, "0x") == 0 || text.compare(i, 2, "0X") == 0;
  if (hex) i += 2;
  const std::string digits = text.substr(i);
  if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos)
    return std::nullopt;
  long double value = 0;
  for (char c : digits) value = value * (hex ? 16 : 10) + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  if (hex) {  // exact while it fits 64 bits; beyond, the flag's bound refuses it anyway
    char text_value[48];
    std::snprintf(text_value, sizeof text_value, "%.0Lf", value);
    canonical = text_value;
  } else {
    const size_t first = digits.find_first_not_of('0');
    canonical = first == std::string::npos ? "0" : digits.substr(first);
  }
  if (negative && canonical != "0") canonical = "-" + canonical;
  return negative ? -value : value;
}
}  // namespace

std::optional<NumberError> canonical_numbers(const CLI::App& app, std::vector<std::string>& args,
                                             std::string_view command) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].size() < 2 || args[i][0] != '-') continue;
    const size_t eq = args[i].find('=');
    const CLI::Option* opt = app.get_option_no_throw(args[i].substr(0, eq));
    if (!opt || opt->get_expected_min() == 0 || opt->get_lnames().empty()) continue;
    std::string* value = nullptr;  // the text the option will read
    std::string attached;
    if (eq != std::string::npos) attached = args[i].substr(eq + 1), value = &attached;
    else if (i + 1 < args.size()) value = &args[++i];
    else continue;  // CLI11 says the value is missing
    const std::string type = opt->get_type_name();
    const bool integer = type.find("INT") != std::string::npos, unsigned_type = type.find("UINT") != std::string::npos;
    if (!integer && type.find("FLOAT") == std::string::npos) continue;
    const std::string name = opt->get_lnames().front();
    const FlagBound* bound = find_flag_bound(command, name);
    if (bound && !bound->word.empty() && *value == bound->word) continue;  // --save-every auto
    if (integer) {
      std::string canonical;
      const std::optional<long double> v = whole_number(*value, canonical);
      if (!v) {
        if (unsigned_type) continue;  // --seed's own check names what a seed is
        const std::string range = bound ? " between " + number_text(bound->lo) + " and " +
                                              (bound->hi_text.empty() ? number_text(bound->hi) : std::string(bound->hi_text)) +
                                              (bound->word.empty() ? "" : ", or " + std::string(bound->word))
                                        : "";
        return NumberError{"--" + name + " takes a whole number" + range + " (got " + *value + ")", true};
      }
      // Past 32 bits CLI11 may not hold it: say the flag's range, as the bound check would.
      if (!unsigned_type && bound && std::fabs(*v) > 2147483647.0L) {
        const std::string message = bound_violation(*bound, canonical, true);
        if (!message.empty()) return NumberError{message, false};
      }
      *value = canonical;
    } else {
      const char* begin = value->c_str();
      char* end = nullptr;
      const long double v = std::strtold(begin, &end);
      if (value->empty() || end == begin || *end != '\0')
        return NumberError{"--" + name + " takes a number" +
                               (bound ? std::string(" in ") + (bound->lo_open ? "(" : "[") + number_text(bound->lo) + ", " +
                                            (bound->hi_text.empty() ? number_text(bound->hi) : std::string(bound->hi_text)) +
                                            (bound->hi_open ? ")" : "]")
                                      : std::string()) +
                               " (got " + *value + ")",
                           true};
      if (value->find_first_of("xX") != std::string::npos && std::isfinite(v)) {  // a hex float, in decimal
        char text[48];
        std::snprintf(text, sizeof text, "%.17Lg", v);
        *value = text;
      }
    }
    if (eq != std::string::npos) args[i] = args[i].substr(0, eq + 1) + attached;
  }
  return std::nullopt;
}

void check_flag_bounds(const CLI::App& app, std::string_view command) {
  for (const CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (opt->get_lnames().empty() || opt->get_expected_min() == 0) continue;
    const bool duration = type == "DURATION";
    if (type.find("INT") == std::string::npos && type.find("FLOAT") == std::string::npos && !duration) continue;
    const std::string& name = opt->get_lnames().front();
    const FlagBound* bound = find_flag_bound(command, name);
    if (!bound) throw std::logic_error("--" + name + " of lattice " + std::string(command) + " has no bound in cli/flag_rules.cpp");
    if (opt->count() == 0 || opt->results().empty()) continue;
    const std::string& value = opt->results().back();
    if (!bound->word.empty() && value == bound->word) continue;
    if (duration) {  // bounded in seconds, named as given
      const std::optional<double> seconds = parse_duration(value);
      if (!seconds)  // not a duration at all: usage, exit 2 (out of bounds below: exit 1)
        throw UsageError("--" + name + " takes a duration: seconds, or a number with s, m, h or d (90m, 6h; got " +
                         value + ")");
      char text[48];
      std::snprintf(text, sizeof text, "%.17g", *seconds);
      const std::string message = bound_violation(*bound, text, false);
      require(message.empty(), message.substr(0, message.rfind(" (got ")) + " seconds (got " + value + ")");
      continue;
    }
    const std::string message = bound_violation(*bound, value, type.find("FLOAT") == std::string::npos);
    require(message.empty(), message);
  }
}

void check_repeated_flags(const CLI::App& app, const std::vector<std::string>& args) {
  std::map<const CLI::Option*, std::pair<std::string, std::string>> seen;  // option → (as written, value)
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].size() < 2 || args[i][0] != '-') continue;
    const size_t eq = args[i].find('=');
    const std::string name = args[i].substr(0, eq);
    const CLI::Option* opt = app.get_option_no_throw(name);
    if (!opt || opt->get_expected_min() == 0 || opt->get_expected_max() > 1) continue;  // a flag: twice is once
    // A path given twice: one of two files would silently be neither read nor written. A flag
    // given by two of its names (--layers, --num-layers) with two values: neither spelling reads as
    // the override of the other. The same name twice keeps "the last one wins", so a script's
    // settings can be overridden by hand (the test scripts append to a model's flags so).
    static const std::set<std::string> kPathFlags = {"data", "save", "init", "resume", "report-dir", "trace",
                                                     "checkpoint", "offload-optimizer", "offload-params", "out",
                                                     "input", "html", "svg", "config", "from-trace", "hardware",
                                                     "tokenizer-from", "hostfile", "mpirun"};
    const bool path = !opt->get_lnames().empty() && kPathFlags.count(opt->get_lnames().front());
    std::string value;
    if (eq != std::string::npos) value = args[i].substr(eq + 1);
    else if (i + 1 < args.size()) value = args[++i];
    auto [it, fresh] = seen.emplace(opt, std::make_pair(name, value));
    require(fresh || it->second.second == value || (!path && it->second.first == name),
            name + " given twice: " + it->second.first + " " + it->second.second + " and " + name + " " + value +
                " (one value a flag; pass one)");
    if (!fresh) it->second = {name, value};
  }
}

namespace {
// The last value of --`name` as given, or nullopt when not given (or not a flag of the command). A
// flag (no value) counts as given when on: --flag=false says what not giving it says.
std::optional<std::string> given(const CLI::App& app, const std::string& name) {
  const CLI::Option* opt = app.get_option_no_throw("--" + name);
  if (!opt || opt->count() == 0) return std::nullopt;
  if (opt->get_expected_min() == 0) return flag_on(opt) ? std::optional<std::string>("true") : std::nullopt;
  return opt->results().back();
}
// The value in effect: as given, else the default `fallback`.
std::string in_effect(const CLI::App& app, const std::string& name, const std::string& fallback) {
  return given(app, name).value_or(fallback);
}
double number(const std::string& text) { return std::strtod(text.c_str(), nullptr); }
}  // namespace

void check_flag_conflicts(const CLI::App& app, std::string_view command) {
  const std::string cmd(command);
  const bool inference = cmd == "eval" || cmd == "sample";
  require(!inference || !given(app, "dropout"), "--dropout does not apply here: inference runs without dropout");
  if (const auto zero = given(app, "zero"); zero && given(app, "use-distributed-optimizer") && *zero != "1")
    fail("--use-distributed-optimizer (ZeRO 1) and --zero " + *zero + " contradict: pass one");
  if (const auto cf = given(app, "moe-expert-capacity-factor"); cf && given(app, "moe-no-drop") && number(*cf) != 0)
    fail("--moe-no-drop (capacity factor 0) and --moe-expert-capacity-factor " + *cf + " contradict: pass one");
  // An MoE flag given on a dense model would be ignored; ModelConfig::validate sees only values, so a
  // flag given at its default (--moe-router topk) passed there. Where a checkpoint gives the model
  // (eval, sample), each given flag is compared with it instead (cli/model_source.cpp); a resume or
  // --init without --num-experts takes the checkpoint's experts, and is checked there (take_checkpoint_model).
  if (!inference && number(in_effect(app, "num-experts", "0")) == 0 &&
      ((!given(app, "resume") && !given(app, "init")) || given(app, "num-experts")))
    for (const ModelFlag& row : model_flag_table())
      for (const char* moe_flag : {row.flag, row.alias})
        if (const auto v = row.moe && moe_flag ? given(app, moe_flag) : std::nullopt)
          fail("--" + std::string(moe_flag) + (*v == "true" ? std::string() : " " + *v) +
               ": the --moe-* and --expert-dropout flags need a Mixture-of-Experts model (--num-experts E; got " +
               (given(app, "num-experts") ? "--num-experts 0" : "none") + ")");
  if (const auto plan = given(app, "recompute-plan"), mode = given(app, "recompute"); plan && mode)
    fail("--recompute " + *mode + " and --recompute-plan " + *plan +
         " both given: the plan sets every layer's mode; pass one");
  // Pipeline-only flags on one stage would be ignored (plan --search chooses p itself). PipeDream-2BW
  // is not among them: its updates land one step late on one stage too (the suite's reference run).
  const bool one_stage = number(in_effect(app, "pipeline-model-parallel-size", "1")) == 1;
  if ((cmd == "train" || (cmd == "plan" && !given(app, "search"))) && one_stage) {
    const std::string schedule = in_effect(app, "schedule", "1f1b");
    require(schedule != "interleaved" && schedule != "zb-h1",
            "--schedule " + schedule + " needs a pipeline (--pipeline-model-parallel-size > 1; got 1)");
    const auto m = given(app, "virtual-stages");
    require(!m || number(*m) == 1,
            "--virtual-stages needs --pipeline-model-parallel-size > 1 (got --virtual-stages " + m.value_or("") +
                " with --pipeline-model-parallel-size 1)");
  }
  // A ring or all-to-all needs context-parallel ranks (plan --search chooses c itself); a value that is
  // neither is named by its parser.
  if (cmd == "train" || (cmd == "plan" && !given(app, "search")))
    if (const auto comm = given(app, "cp-comm-type");
        comm && (*comm == "p2p" || *comm == "a2a") && number(in_effect(app, "context-parallel-size", "1")) == 1)
      fail("--cp-comm-type " + *comm + " applies to --context-parallel-size > 1 (got 1)");
  if (cmd == "train") {
    // Each optimizer's hyperparameters: the others' would be ignored (Adafactor's second moment decays
    // as 1 - t^-0.8 and it keeps no momentum; SM3's β1 is its momentum, and it has no β2 or ε).
    const std::string optimizer = in_effect(app, "optimizer", "adamw");
    if (optimizer == "adafactor" || optimizer == "sm3")
      for (const std::string f : {"beta1", "beta2", "eps"}) {
        if (optimizer == "sm3" && f == "beta1") continue;
        if (const auto v = given(app, f))
          fail("--" + f + " " + *v + " does not apply to --optimizer " + optimizer + " (" +
               (optimizer == "sm3" ? "SM3 reads --beta1, its momentum, --lr and --weight-decay"
                                   : "Adafactor reads --lr and --weight-decay; its second moment decays as 1 - t^-0.8, "
                                     "without momentum") +
               ")");
      }
    require(!given(app, "override-schedule") || given(app, "resume"),
            "--override-schedule applies to --resume only (a new run takes the given schedule anyway)");
    if (const auto batches = given(app, "eval-batches"); batches && number(in_effect(app, "eval-every", "0")) == 0)
      fail("--eval-batches " + *batches + " applies with --eval-every N only (no validation runs without it)");
    const std::string schedule = in_effect(app, "lr-schedule", "cosine");
    if (const auto min_lr = given(app, "min-lr"))
      require(schedule == "cosine", "--min-lr " + *min_lr + " applies to --lr-schedule cosine only (got --lr-schedule " +
                                        schedule + ")");
    // A resume runs in its checkpoint's precision unless the flag is given (take_resumed_precision).
    std::string dtype = in_effect(app, "params-dtype", "fp32");
    const auto resume = given(app, "resume");
    checkpoint::RecordedPrecision saved;
    if (resume && checkpoint::holds_trainer_state(*resume)) {
      saved = checkpoint::read_recorded_precision(*resume);
      if (!given(app, "params-dtype") && saved.params) dtype = to_string(*saved.params);
    }
    for (const char* fp16_only : {"initial-loss-scale", "loss-scale-window"})
      if (const auto v = given(app, fp16_only))
        require(dtype == "fp16", "--" + std::string(fp16_only) + " " + *v +
                                     " applies to --params-dtype fp16 only (loss scaling; got --params-dtype " + dtype +
                                     (!given(app, "params-dtype") && saved.params ? ", checkpoint " + *resume + "'s)" : ")"));
    // The run's own first scale (a relaunch repeats the job's flags) is no change; another would be
    // ignored, the resume going on from the scale the run reached.
    if (const auto v = given(app, "initial-loss-scale");
        v && dtype == "fp16" && saved.loss_scale > 0 && saved.initial_loss_scale > 0 && number(*v) != saved.initial_loss_scale)
      fail("--initial-loss-scale " + *v + " differs from checkpoint " + *resume + "'s " +
           number_text(saved.initial_loss_scale) + ": a resume goes on from the loss scale the run reached (" +
           number_text(saved.loss_scale) + "); leave the flag out");
  }
}

}  // namespace lattice::cli
