#include "train/loss_spike_guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace lattice {

LossSpikeGuard::LossSpikeGuard(int64_t vocab, const std::vector<double>& history)
    : ceiling_(kCeilingFactor * std::log(double(std::max<int64_t>(vocab, 2)))) {
  for (double loss : history) add(loss);
}

void LossSpikeGuard::add(double loss) {
  if (!std::isfinite(loss)) return;
  window_.push_back(loss);
  if (window_.size() > kWindow) window_.pop_front();
}

LossSpikeGuard::WindowStats LossSpikeGuard::stats() const {
  WindowStats s;
  s.losses = window_.size();
  if (window_.empty()) return s;
  double sum = 0;
  for (double x : window_) sum += x;
  s.mean = sum / double(s.losses);
  double squares = 0;
  for (double x : window_) squares += (x - s.mean) * (x - s.mean);
  s.std = s.losses > 1 ? std::sqrt(squares / double(s.losses - 1)) : 0.0;
  std::vector<double> sorted(window_.begin(), window_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  s.median = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
  return s;
}

LossSpikeGuard::Verdict LossSpikeGuard::judge(double loss) const {
  Verdict v;
  v.window = stats();
  auto fire = [&](Rule rule, double threshold) {
    v.outlier = true, v.rule = rule, v.threshold = threshold;
  };
  // Rules in order of robustness: the first that fires is the one reported.
  if (!std::isfinite(loss)) {
    fire(Rule::finite, 0);
  } else if (loss > ceiling_) {
    fire(Rule::ceiling, ceiling_);
  } else if (const double limit = std::max(kMedianFactor * v.window.median, v.window.median + kMedianMinRise);
             v.window.losses >= 1 && loss > limit) {
    fire(Rule::median, limit);
  } else if (v.window.losses >= kMinHistory) {
    const double scale = std::max({v.window.std, kStdFloor * std::abs(v.window.mean), kStdFloorNats});
    const double threshold = v.window.mean + kSigmas * scale;
    if (loss > threshold) fire(Rule::z, threshold);
  }
  return v;
}

const char* LossSpikeGuard::name(Rule rule) {
  switch (rule) {
    case Rule::finite: return "finite";
    case Rule::ceiling: return "ceiling";
    case Rule::median: return "median";
    case Rule::z: return "z";
    case Rule::none: break;
  }
  return "";
}

std::string LossSpikeGuard::describe(double loss, const Verdict& v) {
  char text[320];
  const WindowStats& w = v.window;
  if (v.rule == Rule::finite) {
    std::snprintf(text, sizeof text, "loss %g is not finite", loss);
    return text;
  }
  const char* limit = v.rule == Rule::ceiling ? "2·ln(vocab)" : v.rule == Rule::median ? "10x the median" : "mean + 6 std";
  std::snprintf(text, sizeof text, "loss %.6g is above %.6g (%s) against the last %zu step losses (mean %.6g, std %.3g, median %.6g)",
                loss, v.threshold, limit, w.losses, w.mean, w.std, w.median);
  return text;
}

}  // namespace lattice
