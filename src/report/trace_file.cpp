#include "report/trace_file.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "core/error.hpp"
#include "engine/schedule.hpp"
#include "core/input_file.hpp"

namespace lattice {

namespace {

constexpr int kMaxTracks = 65536;  // ranks a trace can name: above any world lattice runs

[[noreturn]] void not_a_trace(const std::string& path, const std::string& why) {
  fail("trace " + path + " is not a lattice trace (write one with lattice train --trace): " + why);
}

// Microseconds (the file's unit, to the nanosecond) to integer nanoseconds.
int64_t to_ns(const nlohmann::json& e, const char* field, const std::string& path) {
  if (!e.contains(field) || !e[field].is_number()) not_a_trace(path, std::string("an event has no numeric ") + field);
  const double us = e[field].get<double>();
  if (!std::isfinite(us) || std::fabs(us) > 1e15)
    not_a_trace(path, std::string("an event's ") + field + " is not a time in microseconds");
  return std::llround(us * 1000.0);
}

int64_t arg(const nlohmann::json& args, const char* key, const std::string& path) {
  if (!args.contains(key)) return -1;
  const nlohmann::json& v = args[key];
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX)) ||
      v.get<int64_t>() < -1 || v.get<int64_t>() > INT32_MAX)
    not_a_trace(path, std::string("an event's args.") + key + " is not an integer from -1 to 2^31 - 1");
  return v.get<int64_t>();
}

TraceLayout layout_of(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) not_a_trace(path, "its otherData.layout is not an object");
  TraceLayout l;
  const auto count = [&](const char* key, int most) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1 || j[key].get<int64_t>() > most)
      not_a_trace(path, std::string("its otherData.layout.") + key + " is not a count from 1 to " + std::to_string(most));
    return int(j[key].get<int64_t>());
  };
  if (!j.contains("schedule") || !j["schedule"].is_string())
    not_a_trace(path, "its otherData.layout.schedule is not a schedule's name");
  l.schedule = j["schedule"].get<std::string>();
  try {
    parallel::pipeline::parse_schedule_kind(l.schedule);
  } catch (const InputError&) {
    not_a_trace(path, "its otherData.layout.schedule '" + l.schedule + "' is not a schedule lattice runs");
  }
  l.world = count("world", kMaxTracks);
  l.pp = count("pp", l.world);
  l.virtual_stages = count("virtual_stages", 1 << 16);
  l.micro_batches = count("micro_batches", INT32_MAX);
  if (l.world % l.pp != 0) not_a_trace(path, "its otherData.layout.pp does not divide its world");
  return l;
}

TraceFile read_doc(const nlohmann::json& doc, const std::string& path) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    fail("trace " + path + " has no traceEvents (write one with lattice train --trace)");
  std::map<std::string, Trace::Kind> kinds;
  for (int k = 0; k < Trace::kKinds; ++k) kinds[Trace::name(Trace::Kind(k))] = Trace::Kind(k);
  TraceFile file;
  if (doc.contains("otherData") && doc["otherData"].is_object() && doc["otherData"].contains("layout")) {
    file.layout = layout_of(doc["otherData"]["layout"], path);
    const nlohmann::json& other = doc["otherData"];
    if (other.contains("run_id")) {
      if (!other["run_id"].is_string() || other["run_id"].get<std::string>().size() > 64)
        not_a_trace(path, "its otherData.run_id is not a run's id");
      file.layout->run_id = other["run_id"].get<std::string>();
    }
  }
  for (const auto& e : doc["traceEvents"]) {
    if (!e.is_object()) not_a_trace(path, "an event is not an object");
    const nlohmann::json* ph = e.contains("ph") && e["ph"].is_string() ? &e["ph"] : nullptr;
    if (ph && *ph == "M") continue;  // a track's name
    if (!ph || *ph != "X") not_a_trace(path, "an event is neither a span (ph X) nor a track's name (ph M)");
    const std::string cat = e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    const auto kind = kinds.find(cat);
    if (kind == kinds.end()) not_a_trace(path, "an event is of unknown kind " + nlohmann::json(cat).dump());
    if (!e.contains("tid") || !e["tid"].is_number_integer() || e["tid"].get<int64_t>() < 0 ||
        e["tid"].get<int64_t>() >= kMaxTracks)
      not_a_trace(path, "an event's track (tid, its rank) is not an integer from 0 to " + std::to_string(kMaxTracks - 1));
    TraceFileSpan s{kind->second, int(e["tid"].get<int64_t>()), to_ns(e, "ts", path), 0};
    const int64_t dur = to_ns(e, "dur", path);
    if (dur < 0) not_a_trace(path, "an event has a negative duration (dur " + e["dur"].dump() + ")");
    s.end = s.start + dur;
    if (e.contains("args")) {
      const nlohmann::json& a = e["args"];
      if (!a.is_object()) not_a_trace(path, "an event's args is not an object");
      s.step = arg(a, "step", path), s.micro_batch = arg(a, "micro_batch", path), s.chunk = arg(a, "chunk", path);
    }
    if (s.kind == Trace::Kind::step && s.step < 0) not_a_trace(path, "a step span has no args.step");
    if (file.layout && s.rank >= file.layout->world)
      not_a_trace(path, "a span of rank " + std::to_string(s.rank) + " in a trace of " +
                            std::to_string(file.layout->world) + " ranks");
    file.tracks = std::max(file.tracks, s.rank + 1);
    file.spans.push_back(s);
  }
  return file;
}

}  // namespace

nlohmann::json to_json(const TraceLayout& l) {
  return {{"schedule", l.schedule}, {"world", l.world}, {"pp", l.pp}, {"virtual_stages", l.virtual_stages},
          {"micro_batches", l.micro_batches}};
}

std::string describe(const TraceLayout& l) {
  std::string s = "--schedule " + l.schedule + ", " + std::to_string(l.pp) + " pipeline rank" + (l.pp == 1 ? "" : "s");
  if (l.world != l.pp && l.world != 0) s += " of " + std::to_string(l.world);
  if (l.virtual_stages > 1) s += ", " + std::to_string(l.virtual_stages) + " virtual stages";
  return s + ", " + std::to_string(l.micro_batches) + " micro-batch" + (l.micro_batches == 1 ? "" : "es");
}

TraceFile read_trace(const std::string& path) {
  const std::string text = read_regular_file(path, "trace", size_t(1) << 30);  // a FIFO, a directory: one line
  try {
    return read_doc(nlohmann::json::parse(text), path);
  } catch (const nlohmann::json::exception& e) {
    not_a_trace(path, e.what());
  }
}

}  // namespace lattice
