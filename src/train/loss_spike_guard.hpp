#pragma once
// LossSpikeGuard: whether weights may replace the last good checkpoint, judged by the loss they give
// against the run's recent step losses (docs/design.md §14, "The loss-spike guard"). A window of the
// last kWindow step losses, as llm.c's outlier detector keeps; a loss is an outlier when any of three
// rules holds:
//   ceiling: loss > 2·ln(vocab)  (twice a uniform guess's loss: exploded weights, whatever came before);
//   median:  loss > 10 × the window's median and > median + 1 nat  (Megatron's spiky-loss factor,
//            robust to earlier spikes in the window);
//   z:       at least kMinHistory losses, and loss > mean + 6·max(std, 0.02·mean, 0.01 nat).
// Every finite step loss enters the window, spikes included (as in llm.c): the z rule then adapts to
// a real change of level, while the median and the ceiling still hold against sustained explosion.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace lattice {

class LossSpikeGuard {
 public:
  static constexpr size_t kWindow = 128;
  static constexpr size_t kMinHistory = 16;  // the z rule's: a std of fewer losses says little
  static constexpr double kSigmas = 6;       // a Gaussian batch noise passes 6σ once in ~1e9 steps
  static constexpr double kStdFloor = 0.02;  // of the mean: a near-constant loss's std is no scale
  static constexpr double kStdFloorNats = 0.01;  // nor is a near-zero one's (a memorised corpus)
  static constexpr double kMedianFactor = 10;
  static constexpr double kMedianMinRise = 1;  // nats
  static constexpr double kCeilingFactor = 2;  // × ln(vocab)

  struct WindowStats {
    size_t losses = 0;
    double mean = 0, std = 0, median = 0;
  };
  enum class Rule { none, finite, ceiling, median, z };
  static const char* name(Rule rule);  // "finite", "ceiling", "median", "z" ("" for none)
  struct Verdict {
    bool outlier = false;
    Rule rule = Rule::none;  // the rule that fired
    double threshold = 0;  // the loss above which the rule that fired calls an outlier
    WindowStats window;
  };

  // `history`: losses a checkpoint recorded, oldest first (the last kWindow are kept).
  explicit LossSpikeGuard(int64_t vocab, const std::vector<double>& history = {});
  // Judges `loss` against the window as it stands (the loss is not added).
  Verdict judge(double loss) const;
  void add(double loss);  // a step's finite loss
  std::vector<double> history() const { return {window_.begin(), window_.end()}; }
  WindowStats stats() const;
  // "loss L is over RULE THRESHOLD (window of N step losses: mean M, std S, median D)".
  static std::string describe(double loss, const Verdict& v);

 private:
  double ceiling_;
  std::deque<double> window_;
};

}  // namespace lattice
