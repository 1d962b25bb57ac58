// RunRecords (report/run_report.hpp): a run's JSON Lines read into the records a report draws, each
// record checked before it is kept.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "report/run_report.hpp"

namespace lattice {

double record_number(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::numeric_limits<double>::quiet_NaN();
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
}

namespace {

using nlohmann::json;


// A member, or null when the record lacks it.
const json& field(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object()) return null_value;
  const auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

}  // namespace

std::string RunRecords::skipped_warning() const {
  if (skipped_lines == 0) return "";
  return first_skipped + ": left out" +
         (skipped_lines > 1 ? " (and " + std::to_string(skipped_lines - 1) + " more bad lines)" : "");
}

void RunRecords::add(const json& record) {
  const std::string event = record.value("event", std::string());
  const double at = record_number(record, "step");
  // A resumed run repeats the steps after its checkpoint: what came after them before is superseded.
  auto drop_from = [&](std::vector<json>& kept) {
    while (!kept.empty() && record_number(kept.back(), "step") >= at) kept.pop_back();
  };
  if (event == "start") {
    start = record, summary = nullptr;
  } else if (event == "step") {
    drop_from(steps), drop_from(evals), drop_from(stragglers);
    steps.push_back(record);
    if (steps.size() > 2 * kMaxSteps) {
      std::vector<json> thinned;
      for (size_t i = 0; i < steps.size(); ++i)
        if (i % 2 == 0 || i + 1 == steps.size()) thinned.push_back(std::move(steps[i]));
      steps = std::move(thinned);
    }
  } else if (event == "eval" && record.contains("step")) {
    drop_from(evals);
    evals.push_back(record);
  } else if (event == "summary") {
    summary = record;
  } else if (event == "restart") {
    restarts.push_back(record);
  } else if (event == "resumed" && !restarts.empty()) {
    restarts.back()["resumed"] = record;  // the first step after the last relaunch
  } else if (event == "straggler") {
    drop_from(stragglers);
    stragglers.push_back(record);
  }
}

namespace {

bool all_numbers_finite(const json& j) {
  if (j.is_number_float()) return std::isfinite(j.get<double>());
  if (j.is_structured())
    for (const json& v : j)
      if (!all_numbers_finite(v)) return false;
  return true;
}

// Why `record` cannot be part of `run` (empty: it can). `after_start`: the record follows a start
// record with no step between, where a resumed run's first step goes back to its checkpoint's.
std::string record_problem(const json& record, const RunRecords& run, bool after_start) {
  if (!all_numbers_finite(record)) return "a number that is not finite";
  const json& event = field(record, "event");
  if (!event.is_string()) return event.is_null() ? "" : "\"event\" is not a string";
  const std::string kind = event.get<std::string>();
  if (kind != "step" && kind != "eval") return "";
  const json& step = field(record, "step");
  if (!step.is_number_integer() || step.get<int64_t>() < 0)
    return "\"step\" is " + step.dump() + ", not a step number >= 0";
  if (!field(record, "loss").is_number()) return "its \"loss\" is not a number";
  if (kind == "step" && !after_start && !run.steps.empty() && step.get<int64_t>() <= record_number(run.steps.back(), "step"))
    return "step " + step.dump() + " does not follow step " + std::to_string(int64_t(record_number(run.steps.back(), "step"))) +
           " (only a resumed run's start record may go back)";
  return "";
}

}  // namespace

RunRecords read_run_records(const std::string& path) {
  require_regular_file(path, "run log");
  std::ifstream in(path);
  require(bool(in), "cannot read " + path);
  RunRecords run;
  std::string line;
  int64_t number_of_line = 0;
  bool after_start = false;
  std::string previous_event;  // of the last record read
  while (std::getline(in, line)) {
    ++number_of_line;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const bool last_cut_short = in.eof();  // getline reached the end without a newline
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception&) {
      if (last_cut_short) break;  // a run killed mid-line: its complete records stand
      throw InputError(path + " line " + std::to_string(number_of_line) +
                       " is not JSON (a report reads the JSON Lines of lattice train --json)");
    }
    require(record.is_object(), path + " line " + std::to_string(number_of_line) + " is not a JSON object");
    if (const std::string problem = record_problem(record, run, after_start); !problem.empty()) {
      // One bad record is left out, not the whole history (a hand-edited or damaged log).
      if (run.skipped_lines++ == 0) run.first_skipped = path + " line " + std::to_string(number_of_line) + ": " + problem;
      continue;
    }
    const std::string event = record.value("event", std::string());
    // A later start continues the run only as a resume (--resume), or as lattice launch's relaunch
    // (--continue-report, from step 0 where nothing was saved yet): another run's log joined to this
    // one would have its start taken for a resume and this run's steps dropped.
    if (event == "start" && run.start.is_object()) {
      const json& settings = field(record, "settings");
      const bool relaunch = previous_event == "restart" && settings.is_string() &&
                            settings.get<std::string>().find("--continue-report") != std::string::npos;
      require(relaunch || (settings.is_string() && settings.get<std::string>().find("--resume") != std::string::npos),
              path + " line " + std::to_string(number_of_line) +
                  ": a second run starts here, not resumed from the first (two runs' logs joined?): report each "
                  "run's log alone");
    }
    if (event == "start") after_start = true;
    if (event == "step") after_start = false;
    previous_event = event;
    run.add(record);
  }
  // A finished run may have trained no step (--steps 0 saves the initial weights): its summary stands,
  // where it says so. One whose summary counts steps, none of them readable, is refused as empty.
  const bool trained_none = run.start.is_object() && run.summary.is_object() &&
                            !(run.summary.contains("steps") && run.summary["steps"].is_number() &&
                              run.summary["steps"].get<double>() > 0);
  require(!run.steps.empty() || trained_none,
          path + " holds no training step" +
              (run.summary.is_object() && run.summary.contains("steps") && !trained_none
                   ? " it can read (its summary counts " + run.summary["steps"].dump() + ")"
                                                        : std::string(" (is it the output of lattice train --json?)")) +
              (run.skipped_lines > 0 ? "; bad records left out: " + run.skipped_warning() : ""));
  return run;
}

}  // namespace lattice
