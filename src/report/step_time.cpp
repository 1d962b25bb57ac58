#include "report/step_time.hpp"

#include <algorithm>

namespace lattice {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<Straggler> StepTimes::add(int64_t step, const std::vector<RankShares>& ranks, bool timed) {
  if (!timed) return {};
  if (sum_.size() != ranks.size()) {  // the first timed step sets the ranks
    sum_.assign(ranks.size(), {});
    slow_.assign(ranks.size(), false);
    recent_.clear();
    for (size_t i = 0; i < ranks.size(); ++i) sum_[i].rank = ranks[i].rank, sum_[i].stage = ranks[i].stage;
  }
  ++timed_;
  Step now{0, {}};
  for (size_t i = 0; i < ranks.size(); ++i) {
    StepShares& s = sum_[i].shares;
    const StepShares& x = ranks[i].shares;
    s.step_s += x.step_s, s.compute_s += x.compute_s, s.comm_wait_s += x.comm_wait_s, s.bubble_s += x.bubble_s;
    now.step_s = std::max(now.step_s, x.step_s);
    now.compute_s.push_back(x.compute_s);
  }
  recent_.push_back(std::move(now));
  // The window: the newest steps back to where they hold kSteps and kWindowSeconds. Its start only
  // moves forward, so the steps before it are never needed again.
  size_t begin = recent_.size();
  double window_s = 0;
  while (begin > 0 && (recent_.size() - begin < size_t(kSteps) || window_s < kWindowSeconds))
    window_s += recent_[--begin].step_s;
  if (recent_.size() - begin < size_t(kSteps) || window_s < kWindowSeconds) return {};  // not judged yet
  recent_.erase(recent_.begin(), recent_.begin() + long(begin));
  const int steps = int(recent_.size());
  std::vector<double> mean(ranks.size(), 0.0);
  for (const Step& s : recent_)
    for (size_t i = 0; i < mean.size(); ++i) mean[i] += s.compute_s[i] / steps;
  std::vector<Straggler> named;
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<double> peers;
    for (size_t j = 0; j < ranks.size(); ++j)
      if (j != i && ranks[j].stage == ranks[i].stage) peers.push_back(mean[j]);
    const double median = median_of(peers);
    const bool slow = !peers.empty() && mean[i] > (1 + threshold_) * median;
    if (slow && !slow_[i]) {
      named.push_back({step, ranks[i].rank, ranks[i].stage, mean[i], median, steps, window_s, threshold_});
      named_.push_back(named.back());
    }
    slow_[i] = slow;
  }
  return named;
}

nlohmann::json StepTimes::summary_json() const {
  if (timed_ == 0) return nullptr;
  nlohmann::json ranks = nlohmann::json::array(), named = nlohmann::json::array();
  const double n = double(timed_);
  for (const RankShares& r : sum_)
    ranks.push_back({{"rank", r.rank}, {"stage", r.stage}, {"step_s", r.shares.step_s / n},
                     {"compute_s", r.shares.compute_s / n}, {"comm_wait_s", r.shares.comm_wait_s / n},
                     {"bubble_s", r.shares.bubble_s / n}});
  for (const Straggler& s : named_) {
    named.push_back(straggler_json(s));
    named.back().erase("event");  // a list in the summary, not records of the stream
  }
  return {{"steps", timed_}, {"ranks", ranks}, {"stragglers", named},
          {"rule", {{"threshold", threshold_}, {"steps", kSteps}, {"window_s", kWindowSeconds}}}};
}

void StepTimes::print(std::FILE* out) const {
  if (timed_ == 0) return;
  const double n = double(timed_);
  std::fprintf(out, "  step time by rank (mean of %lld steps after the first): compute + communication wait + "
               "pipeline bubble\n", (long long)timed_);
  for (const RankShares& r : sum_) {
    const StepShares& s = r.shares;
    std::fprintf(out, "    rank %d (stage %d): %.4f s = %.4f compute + %.4f wait + %.4f bubble\n", r.rank, r.stage,
                 s.step_s / n, s.compute_s / n, s.comm_wait_s / n, s.bubble_s / n);
  }
  if (named_.empty()) {
    std::fprintf(out, "    no straggler (no rank's compute above %.2fx its stage's median over %d steps and %.0f s)\n",
                 1 + threshold_, kSteps, kWindowSeconds);
    return;
  }
  for (const Straggler& s : named_)
    std::fprintf(out, "    straggler named at step %lld: %s\n", (long long)s.step, straggler_text(s).c_str());
}

std::string straggler_text(const Straggler& s) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "rank %d (stage %d) is a straggler: compute %.4f s a step over the last %d steps (%.2f s), %.2fx the "
                "median %.4f s of its stage's other ranks (rule: above %.2fx over at least %d steps and %.0f s)",
                s.rank, s.stage, s.compute_s, s.steps, s.window_s, s.ratio(), s.peers_s, 1 + s.threshold,
                StepTimes::kSteps, StepTimes::kWindowSeconds);
  return buf;
}

nlohmann::json straggler_json(const Straggler& s) {
  return {{"event", "straggler"}, {"step", s.step},          {"rank", s.rank},
          {"stage", s.stage},     {"compute_s", s.compute_s}, {"peers_median_s", s.peers_s},
          {"ratio", s.ratio()},   {"steps", s.steps},         {"window_s", s.window_s},
          {"threshold", s.threshold}};
}

}  // namespace lattice
