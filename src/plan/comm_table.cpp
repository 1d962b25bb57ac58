#include "plan/comm_table.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lattice::plan {

const char* to_string(MeasuredOp op) {
  switch (op) {
    case MeasuredOp::all_reduce: return "all_reduce";
    case MeasuredOp::reduce_scatter: return "reduce_scatter";
    case MeasuredOp::all_gather: return "all_gather";
    case MeasuredOp::all_to_all: return "all_to_all";
    case MeasuredOp::p2p: return "p2p";
  }
  return "?";
}

void CommTable::add(CommCurve curve) {
  if (curve.size < 2 || curve.stride < 1) return;
  std::vector<CommSample> kept;
  for (const CommSample& s : curve.samples)
    if (std::isfinite(s.bytes) && std::isfinite(s.seconds) && s.bytes > 0 && s.seconds > 0) kept.push_back(s);
  std::stable_sort(kept.begin(), kept.end(), [](const CommSample& a, const CommSample& b) { return a.bytes < b.bytes; });
  // One sample per size: the mean of the times measured at it.
  std::vector<CommSample> merged;
  for (size_t i = 0; i < kept.size();) {
    size_t j = i;
    double sum = 0;
    for (; j < kept.size() && kept[j].bytes == kept[i].bytes; ++j) sum += kept[j].seconds;
    merged.push_back({kept[i].bytes, sum / double(j - i)});
    i = j;
  }
  if (merged.empty()) return;
  curve.samples = std::move(merged);
  for (CommCurve& c : curves_)
    if (c.op == curve.op && c.size == curve.size && c.stride == curve.stride && c.engine_async == curve.engine_async) {
      c = std::move(curve);
      return;
    }
  curves_.push_back(std::move(curve));
}

bool CommTable::empty() const { return curves_.empty(); }

bool CommTable::has(MeasuredOp op, int size) const {
  return std::any_of(curves_.begin(), curves_.end(), [&](const CommCurve& c) { return c.op == op && c.size == size; });
}

namespace {

// Seconds at `bytes` on one curve (samples sorted by bytes, all positive).
double interpolate(const std::vector<CommSample>& s, double bytes) {
  const CommSample& first = s.front();
  const CommSample& last = s.back();
  if (bytes <= first.bytes) return first.seconds;  // latency-bound: no faster below the table
  if (bytes >= last.bytes) {
    if (bytes == last.bytes) return last.seconds;
    // The last segment's bandwidth (bytes per extra second); when the two largest sizes were too
    // close to tell apart (noise made the larger no slower), the largest sample's own bandwidth.
    if (s.size() >= 2) {
      const CommSample& prev = s[s.size() - 2];
      if (last.seconds > prev.seconds) return last.seconds + (bytes - last.bytes) * (last.seconds - prev.seconds) / (last.bytes - prev.bytes);
    }
    return last.seconds * bytes / last.bytes;
  }
  const auto upper = std::lower_bound(s.begin(), s.end(), bytes,
                                      [](const CommSample& a, double b) { return a.bytes < b; });
  if (upper->bytes == bytes) return upper->seconds;
  const CommSample& hi = *upper;
  const CommSample& lo = *(upper - 1);
  const double t = (std::log(bytes) - std::log(lo.bytes)) / (std::log(hi.bytes) - std::log(lo.bytes));
  return std::exp(std::log(lo.seconds) + t * (std::log(hi.seconds) - std::log(lo.seconds)));
}

}  // namespace

double CommTable::seconds(MeasuredOp op, int size, int stride, double bytes, bool engine_async) const {
  if (size <= 1 || bytes == 0) return 0;
  if (!(bytes > 0)) return std::numeric_limits<double>::quiet_NaN();  // negative or NaN
  // The nearest measured stride (in ratio: 2 is as far from 4 as 8 is; a tie takes the larger,
  // usually the slower), then the asked form, else the other one.
  const double want = std::log(double(std::max(stride, 1)));
  const CommCurve* best = nullptr;
  double best_distance = 0;
  for (const CommCurve& c : curves_) {
    if (c.op != op || c.size != size) continue;
    const double distance = std::abs(std::log(double(c.stride)) - want);
    const bool better = !best || distance < best_distance - 1e-12 ||
                        (std::abs(distance - best_distance) <= 1e-12 &&
                         (c.stride > best->stride ||
                          (c.stride == best->stride && c.engine_async == engine_async)));
    if (better) best = &c, best_distance = distance;
  }
  if (!best) return std::numeric_limits<double>::quiet_NaN();
  return interpolate(best->samples, bytes);
}

}  // namespace lattice::plan
