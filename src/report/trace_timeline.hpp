#pragma once
// A real run's timeline, read from `lattice train --trace` (Chrome trace, one track per rank), in
// the simulator's shape, so the same SVG draws it and the same bubble is measured on it.
#include <string>

#include "report/simulate.hpp"

namespace lattice::parallel::pipeline {

// A trace file's text: one line (InputError) for a file that is missing, not regular, unreadable or
// over 1 GiB. Shared by the timeline and the step split (report/trace_split.hpp).
std::string read_trace_file(const std::string& path);

// The forwards and backwards of optimizer step `step` (-1: the last step in the file), times from
// that step's first action in units of one stage's mean forward (the simulator's unit); p = number
// of pipeline ranks (tracks), m = chunks per rank.
Simulation timeline_from_trace(const std::string& path, int p, int m, int step = -1);

}  // namespace lattice::parallel::pipeline
