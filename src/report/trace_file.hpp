#pragma once
// A `lattice train --trace` file read back once, for every reader (the timeline, report/
// trace_timeline.hpp; the step split, report/trace_split.hpp): its spans checked as the writer
// (report/trace_writer.hpp) writes them, and the layout the run recorded in it, so a trace is not
// measured as a schedule it did not run.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace.hpp"

namespace lattice {

// The layout a traced step ran, as the file's otherData.layout records it (lattice from 2026-11-29;
// older files have none).
struct TraceLayout {
  std::string schedule = "1f1b";  // --schedule's name
  int world = 1;                  // tracks: one per world rank
  int pp = 1, virtual_stages = 1, micro_batches = 1;
  // Not the layout but the start of the run that wrote it (its start record's start_id; a resume is a
  // new start; otherData.start_id): "" where unknown. A report draws no other start's trace.
  std::string start_id;
};
nlohmann::json to_json(const TraceLayout& layout);
// "--schedule interleaved, 2 pipeline ranks of 4, 2 virtual stages, 8 micro-batches" (world 0: unknown)
std::string describe(const TraceLayout& layout);

// One "X" event: a span of rank `rank`'s (its track) recorded thread.
struct TraceFileSpan {
  Trace::Kind kind;
  int rank;
  int64_t start, end;  // ns from the file's origin, end >= start
  int64_t step = -1, micro_batch = -1, chunk = -1;  // args, -1 where absent
};

struct TraceFile {
  std::vector<TraceFileSpan> spans;  // in the file's order
  std::optional<TraceLayout> layout;
  int tracks = 0;                    // 1 + the largest rank of a span
};

// The file at `path` (a regular file of at most 1 GiB), every span checked: a known
// kind, a rank from 0 to 65535, times finite and under 1e15 µs, a length not negative, integer
// args; and the recorded layout, if any, sane (its ranks within its world). Anything else is one
// InputError naming the file: it is not a lattice trace.
TraceFile read_trace(const std::string& path);

}  // namespace lattice
