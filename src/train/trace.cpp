#include "train/trace.hpp"

#include <algorithm>
#include <climits>

#include <nlohmann/json.hpp>

#include "checkpoint/atomic_dir.hpp"
#include "comm/gather_int64.hpp"

namespace lattice {

Trace& Trace::instance() {
  static Trace trace;
  return trace;
}

int64_t Trace::now_us() const {
  // The monotonic clock's own epoch, shared by every process on a machine, so ranks line up.
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Trace::record(Kind kind, int64_t start_us, int64_t end_us, int64_t micro_batch, int64_t chunk, int64_t step) {
  events_.insert(events_.end(), {int64_t(kind), start_us, end_us, micro_batch, chunk, step});
}

void Trace::write(const std::string& path, comm::Communicator* world, int rank) const {
  // Every rank's events, gathered to all (only rank 0 writes).
  const std::vector<std::vector<int64_t>> all =
      world && world->size() > 1 ? comm::all_gather_int64(*world, events_) : std::vector<std::vector<int64_t>>{events_};
  const int ranks = int(all.size());
  if (rank != 0) return;
  int64_t origin = INT64_MAX;  // times from the first event of any rank
  for (const auto& ev : all)
    for (size_t i = 0; i + 6 <= ev.size(); i += 6) origin = std::min(origin, ev[i + 1]);
  static const char* names[] = {"forward", "backward", "receive", "send", "optimizer"};
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    std::string track = "rank ";
    track.append(std::to_string(r));
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r}, {"args", {{"name", track}}}});
    const auto& ev = all[size_t(r)];
    for (size_t i = 0; i + 6 <= ev.size(); i += 6) {
      const int64_t kind = ev[i], mb = ev[i + 3], chunk = ev[i + 4], step = ev[i + 5];
      std::string name = names[kind];
      if (mb >= 0) {  // appended piece by piece: GCC 12 misreads `" mb" + std::string` (-Wrestrict)
        name.append(" mb").append(std::to_string(mb));
        if (chunk > 0) name.append(".").append(std::to_string(chunk));
      }
      nlohmann::json e = {{"name", name}, {"cat", names[kind]}, {"ph", "X"}, {"pid", 0}, {"tid", r},
                          {"ts", ev[i + 1] - origin}, {"dur", std::max<int64_t>(1, ev[i + 2] - ev[i + 1])}};
      if (step >= 0) e["args"] = {{"step", step}, {"micro_batch", mb}, {"chunk", chunk}};
      events.push_back(e);
    }
  }
  const std::string text = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
  checkpoint::write_file_atomically(path, text.data(), text.size());
}

}  // namespace lattice
