#pragma once
// Sections of the run report (report/run_report.hpp) about time lost: each rank's step time split
// into compute, communication wait and pipeline bubble with the stragglers named
// (report/step_time.hpp), and the restarts lattice launch recorded in the same log
// (docs/recovery.md). run_report.cpp puts them on the page.
#include <string>

#include "report/run_report.hpp"

namespace lattice {

std::string step_time_section(const RunRecords& run);
std::string restarts_section(const RunRecords& run);  // drawn only when the log holds a restart

}  // namespace lattice
