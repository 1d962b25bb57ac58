#pragma once
// Writes the recorded trace (core/trace.hpp) of every rank as one Chrome trace file (the Trace Event
// format Perfetto and chrome://tracing open), a track per rank: an "X" event per span, its `cat` the
// kind (Trace::name), `ts` and `dur` in microseconds to the nanosecond (fractions), `args` the step,
// micro-batch and chunk of the spans that carry them. report/trace_split.hpp reads it back.
#include <string>

#include "comm/communicator.hpp"
#include "core/output_path.hpp"
#include "core/trace.hpp"
#include "report/trace_file.hpp"

namespace lattice {

// Collective over `world` (null: this process alone); rank 0 writes `path` atomically, under the
// output rule (core/output_path.hpp) with `rules`. The file carries "otherData": {"generator":
// "lattice", "layout": `layout`}: by the first a later --trace recognises it as lattice's, by the
// second its readers refuse to measure it as another layout's (report/trace_timeline.hpp).
void write_trace(const Trace& trace, const std::string& path, comm::Communicator* world, int rank,
                 const TraceLayout& layout, const OutputRules& rules = {});

}  // namespace lattice
