#pragma once
// The run report: one self-contained HTML page drawn from a training run's JSON Lines (the records
// `lattice train --json` prints, which `train --report-dir` also writes to run.jsonl) and, where
// one exists, its trace — loss and validation curves, learning rate, gradient norm, tokens/s and
// MFU over steps, every rank's memory by category and kept activations by layer and op (measured
// beside the formulas), bytes sent by group and operator, and the pipeline timeline per rank.
// `lattice report` and the trainer's report directory both draw through run_report_html (run_report.cpp);
// the records are read and checked by read_run_records (run_records.cpp).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lattice {

// The records of one run, by kind ("event"); records of other kinds are kept out. A run resumed into
// the same log starts again from its checkpoint's step: a start record drops the earlier summary,
// and a step at or below one already kept drops the kept steps and evaluations from there on, so the
// curves are the run's as it now stands. Beyond kMaxSteps step records every other one is dropped
// (first and last kept): a long run's page and memory stay bounded.
struct RunRecords {
  static constexpr size_t kMaxSteps = 4000;
  nlohmann::json start;  // {"event":"start"}: configuration and predictions (null if absent)
  std::vector<nlohmann::json> steps, evals;
  // Kept across a resume's start record: lattice launch's restart and resumed records (appended to
  // the same run.jsonl), and the stragglers the trainer named (dropped like steps when a resume
  // goes back before them).
  // A resumed record is kept in the restart before it, as "resumed".
  std::vector<nlohmann::json> restarts, stragglers;
  nlohmann::json summary;  // null while the run goes on
  // Records read_run_records left out, and the first of them: "PATH line N: why".
  int64_t skipped_lines = 0;
  std::string first_skipped;
  void add(const nlohmann::json& record);
  // "PATH line N: why: left out (and M more bad lines)", or "" when none was: a warning's text.
  std::string skipped_warning() const;
};

// Reads a JSON Lines file. Throws InputError naming the file and line of a record that is not a
// JSON object, and a file holding no training step ("is this lattice train --json output?"). A last
// line cut short (no newline: a killed run, a full disk) is left out, not an error. A record that
// cannot be a run's is left out and counted (skipped_lines): a number not finite, a step or
// evaluation whose "step" is no integer >= 0 or whose "loss" is no number, a step not above the one
// before it but after a start record (a resume).
RunRecords read_run_records(const std::string& path);

// trace_path: a `lattice train --trace` file, or "" (no timeline section).
// `trace_problem`, when given, gets why the trace's timeline was not drawn ("" when it was or none).
std::string run_report_html(const RunRecords& run, const std::string& trace_path, std::string* trace_problem = nullptr);
// A record's numeric field, NaN when the record is not an object or the field is absent or not a number
// (run_records.cpp; the report's sections read records with it too).
double record_number(const nlohmann::json& j, const char* key);

}  // namespace lattice
