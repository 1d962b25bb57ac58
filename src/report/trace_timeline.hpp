#pragma once
// A real run's timeline, read from `lattice train --trace` (Chrome trace, one track per rank), in
// the simulator's shape, so the same SVG draws it and the same bubble is measured on it.
#include <string>

#include "report/simulate.hpp"
#include "report/trace_file.hpp"

namespace lattice::parallel::pipeline {

using lattice::TraceLayout;

// The forwards and backwards of optimizer step `step` (-1: the last in the file) of a trace of the
// layout `given` (the run's log, or the flags of lattice schedule), times from that step's first
// action in units of one stage's mean forward (the simulator's unit). every_rank: a row per world
// rank; else a row per pipeline rank, its first world rank's (tp = cp = dp = 0: pipeline rank q is
// world rank q·world/pp). given.world 0: the trace's recorded world, or pp for an older trace.
// InputError when the file records another layout (or another start of a run) than `given`, a
// pass lies past its micro-batches or chunks, two passes of a row overlap, or a row's passes are not
// the schedule's in its order (PipeDream-2BW's: one of its four kinds of step; one stage's: each
// micro-batch's forward and backward in turn, whatever the schedule): a trace of another layout, or
// one cut short.
Simulation timeline_from_trace(const std::string& path, const TraceLayout& given, int step = -1,
                               bool every_rank = false);

}  // namespace lattice::parallel::pipeline
