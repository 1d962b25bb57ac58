#include "report/trace_file.hpp"

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
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

// otherData: the layout (and run) the trace records, when it records one.
void take_other_data(TraceFile& file, const nlohmann::json& other, const std::string& path) {
  if (!other.is_object() || !other.contains("layout")) return;
  file.layout = layout_of(other["layout"], path);
  if (other.contains("start_id")) {
    if (!other["start_id"].is_string() || other["start_id"].get<std::string>().size() > 64)
      not_a_trace(path, "its otherData.start_id is not a run's start id");
    file.layout->start_id = other["start_id"].get<std::string>();
  }
}

// One element of traceEvents: a span kept, a track's name passed over, anything else refused.
void take_event(TraceFile& file, const nlohmann::json& e, const std::string& path) {
  static const std::map<std::string, Trace::Kind> kinds = [] {
    std::map<std::string, Trace::Kind> k;
    for (int i = 0; i < Trace::kKinds; ++i) k[Trace::name(Trace::Kind(i))] = Trace::Kind(i);
    return k;
  }();
  if (!e.is_object()) not_a_trace(path, "an event is not an object");
  const nlohmann::json* ph = e.contains("ph") && e["ph"].is_string() ? &e["ph"] : nullptr;
  if (ph && *ph == "M") return;  // a track's name
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
  file.tracks = std::max(file.tracks, s.rank + 1);
  file.spans.push_back(s);
}

// The file parsed as a stream of events: each element of traceEvents is built, taken and dropped in
// turn (and otherData whole), so memory holds the spans, not the document (a DOM of a large trace
// took ~23 times its size, and ran out of memory where it could not say so in one line).
class TraceEventStream final : public nlohmann::json_sax<nlohmann::json> {
 public:
  using json = nlohmann::json;
  TraceEventStream(TraceFile& file, const std::string& path) : file_(file), path_(path) {}
  bool saw_events() const { return saw_events_; }

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override { return value(json(std::move(v))); }
  bool binary(binary_t&) override { return value(json()); }  // not in JSON text
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (!stack_.empty()) key_ = k;
    else if (depth_ == 1) top_key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    not_a_trace(path_, e.what());
  }

 private:
  enum class Target { event, other_data };
  // Into the value being built: the slot it took (the root, an object's key, an array's end).
  json* place(json&& v) {
    if (stack_.empty()) return &(root_ = std::move(v));
    json& parent = *stack_.back();
    if (parent.is_object()) return &(parent[key_] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }
  void emit() {
    if (target_ == Target::event) take_event(file_, root_, path_);
    else take_other_data(file_, root_, path_);
    root_ = json();
  }
  bool value(json&& v) {
    if (!stack_.empty()) {
      place(std::move(v));
    } else if (depth_ == 0) {
      not_a_trace(path_, "it is not a JSON object");
    } else if (in_events_ && depth_ == 2) {  // a scalar event: refused as one
      root_ = std::move(v), target_ = Target::event, emit();
    }
    return true;  // else a top-level scalar (displayTimeUnit) or one in a container passed over
  }
  bool open(json&& container) {
    if (!stack_.empty()) {
      stack_.push_back(place(std::move(container)));
      return true;
    }
    ++depth_;
    if (depth_ == 1) {
      if (!container.is_object()) not_a_trace(path_, "it is not a JSON object");
    } else if (depth_ == 2 && top_key_ == "traceEvents" && container.is_array()) {
      in_events_ = saw_events_ = true;
    } else if ((depth_ == 3 && in_events_) || (depth_ == 2 && top_key_ == "otherData")) {
      target_ = in_events_ ? Target::event : Target::other_data;
      stack_.push_back(place(std::move(container)));
    }
    return true;
  }
  bool close() {
    if (!stack_.empty()) {
      stack_.pop_back();
      if (!stack_.empty()) return true;
      emit();
    } else if (depth_ == 2) {
      in_events_ = false;
    }
    --depth_;
    return true;
  }

  TraceFile& file_;
  const std::string& path_;
  int depth_ = 0;  // containers open around the value being built
  std::string top_key_, key_;
  bool in_events_ = false, saw_events_ = false;
  Target target_ = Target::event;
  json root_;
  std::vector<json*> stack_;  // the containers open in the value being built
};

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
  require_regular_file(path, "trace");  // a FIFO, a directory: one line
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  require(!ec && bytes <= (uintmax_t(1) << 30), "trace " + path + " is over 1 GiB: not a lattice trace of one run");
  std::ifstream in(path, std::ios::binary);
  require(bool(in), "cannot read trace " + path + ": " + std::strerror(errno));
  TraceFile file;
  TraceEventStream stream(file, path);
  try {
    nlohmann::json::sax_parse(in, &stream);
  } catch (const nlohmann::json::exception& e) {
    not_a_trace(path, e.what());
  }
  if (!stream.saw_events()) fail("trace " + path + " has no traceEvents (write one with lattice train --trace)");
  if (file.layout)
    for (const TraceFileSpan& s : file.spans)
      if (s.rank >= file.layout->world)
        not_a_trace(path, "a span of rank " + std::to_string(s.rank) + " in a trace of " +
                              std::to_string(file.layout->world) + " ranks");
  return file;
}

}  // namespace lattice
