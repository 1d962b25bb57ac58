#include "report/trace_writer.hpp"

#include <algorithm>
#include <climits>

#include <nlohmann/json.hpp>

#include "comm/gather_int64.hpp"

namespace lattice {

void write_trace(const Trace& trace, const std::string& path, comm::Communicator* world, int rank,
                 const TraceLayout& layout, const OutputRules& rules) {
  const std::vector<int64_t>& recorded = trace.events();
  // Every rank's events, gathered to all (only rank 0 writes).
  const std::vector<std::vector<int64_t>> all =
      world && world->size() > 1 ? comm::all_gather_int64(*world, recorded) : std::vector<std::vector<int64_t>>{recorded};
  const int ranks = int(all.size());
  if (rank != 0) return;
  int64_t origin = INT64_MAX;  // times from the first event of any rank
  for (const auto& ev : all)
    for (size_t i = 0; i + 6 <= ev.size(); i += 6) origin = std::min(origin, ev[i + 1]);
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    std::string track = "rank ";
    track.append(std::to_string(r));
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r}, {"args", {{"name", track}}}});
    const auto& ev = all[size_t(r)];
    for (size_t i = 0; i + 6 <= ev.size(); i += 6) {
      const int64_t kind = ev[i], mb = ev[i + 3], chunk = ev[i + 4], step = ev[i + 5];
      const char* cat = Trace::name(Trace::Kind(kind));
      std::string name = cat;
      if (mb >= 0) {  // appended piece by piece: GCC 12 misreads `" mb" + std::string` (-Wrestrict)
        name.append(" mb").append(std::to_string(mb));
        if (chunk > 0) name.append(".").append(std::to_string(chunk));
      }
      // Microseconds (the format's unit) to the nanosecond, so nested spans stay nested when read back.
      nlohmann::json e = {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", r},
                          {"ts", double(ev[i + 1] - origin) / 1000.0}, {"dur", double(ev[i + 2] - ev[i + 1]) / 1000.0}};
      if (step >= 0) e["args"] = {{"step", step}, {"micro_batch", mb}, {"chunk", chunk}};
      events.push_back(e);
    }
  }
  const nlohmann::json doc = {
      {"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", {{"generator", kTraceGenerator}, {"layout", to_json(layout)}, {"start_id", layout.start_id}}}};
  write_output_file(path, OutputKind::trace, "--trace", doc.dump() + "\n", rules);
}

}  // namespace lattice
