#include "report/schedule_svg.hpp"

#include "core/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"

namespace lattice::parallel::pipeline {

namespace {

constexpr double kLeft = 70, kRight = 110;  // rank labels; peak in-flight column
constexpr double kTop = 96, kRowH = 30, kRowGap = 6;
constexpr double kAxisH = 40, kLegendH = 30;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();  // "12.50" -> "12.5", "12.00" -> "12."
  if (s.back() == '.') s.pop_back();
  return s;
}

using svg::hsl;

// Forward blue, backward green as in the papers' figures; later chunks lighter.
double chunk_lightness(int chunk, int m) { return m == 1 ? 0.47 : 0.36 + 0.34 * chunk / (m - 1); }
// A split backward's weight pass amber (the input pass stays green).
std::string box_fill(Pass pass, int chunk, int m) {
  if (pass == Pass::forward) return hsl(212, 0.62, chunk_lightness(chunk, m));
  if (pass == Pass::backward_weight) return hsl(35, 0.80, chunk_lightness(chunk, m));
  return hsl(140, 0.48, chunk_lightness(chunk, m));
}
const char* text_class(int chunk, int m) { return chunk_lightness(chunk, m) < 0.55 ? "lbl" : "lbl dark"; }

// describe_action writes "<-r1": text content needs its markup characters escaped.
std::string xml_escape(const std::string& text) { return svg::escape(text); }

// A tick step of 1, 2 or 5 × 10^k giving about `target` ticks.
double tick_step(double span, int target) {
  const double raw = span / target, p10 = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * p10 >= raw) return f * p10;
  return 10 * p10;
}

const char* long_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "GPipe";
    case ScheduleKind::one_f_one_b: return "1F1B (PipeDream-flush)";
    case ScheduleKind::interleaved: return "Interleaved 1F1B";
    case ScheduleKind::zb_h1: return "ZB-H1 (zero bubble)";
    case ScheduleKind::pipedream_2bw: return "PipeDream-2BW (no flush)";
  }
  return "";
}

}  // namespace

std::string schedule_svg(const Simulation& sim, const TimelineCaption& cap) {
  size_t actions = 0;
  for (const auto& line : sim.ranks) actions += line.actions.size();
  require(actions <= size_t(kMaxSvgActions), "--svg draws at most " + std::to_string(kMaxSvgActions) +
                                                 " actions (this schedule has " + std::to_string(actions) + ")");
  const int p = int(sim.ranks.size()), m = cap.m;
  const double total = std::max(sim.total_time, 1e-9);
  // Scale so the narrowest box (a chunk's forward) stays wide enough for its label where possible.
  const double min_box = cap.options.forward_time / m;
  const double scale = std::clamp(std::max(1100.0 / total, 22.0 / min_box), 2.0, 60.0);
  const double plot_w = total * scale;
  const double width = std::max(kLeft + plot_w + kRight, 640.0);
  const double rows_h = p * (kRowH + kRowGap) - kRowGap;
  const double height = kTop + rows_h + kAxisH + kLegendH;
  const double formula = bubble_formula(cap.kind, cap.p, cap.n_mb, cap.m, cap.options, cap.steps);
  const bool two_bw = cap.kind == ScheduleKind::pipedream_2bw;

  std::ostringstream out;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << num(width) << "' height='" << num(height)
      << "' viewBox='0 0 " << num(width) << ' ' << num(height) << "' font-family='Helvetica, Arial, sans-serif'>\n"
      << "<style>.title{font-size:17px;font-weight:bold;fill:#222}.sub{font-size:12px;fill:#555}"
         ".rank{font-size:12px;fill:#333;text-anchor:end;dominant-baseline:middle}"
         ".peak{font-size:11px;fill:#555;dominant-baseline:middle}"
         ".lbl{font-size:11px;fill:#fff;text-anchor:middle;dominant-baseline:central}.dark{fill:#1d2b3a}"
         ".tick{font-size:10px;fill:#666;text-anchor:middle}.grid{stroke:#e2e2e2;stroke-width:1}"
         ".lane{fill:#f6f6f6;stroke:#dcdcdc;stroke-width:1}.box{stroke:#fff;stroke-width:1}"
         ".legend{font-size:11px;fill:#333;dominant-baseline:middle}</style>\n"
      << "<rect width='100%' height='100%' fill='#fff'/>\n";

  out << "<text x='16' y='28' class='title'>" << long_name(cap.kind) << " — p = " << cap.p << ", "
      << cap.n_mb << " micro-batches" << (m > 1 ? ", m = " + std::to_string(m) + " chunks per rank" : "")
      << (cap.steps > 1 ? ", " + std::to_string(cap.steps) + " steps" : "") << "</text>\n";
  // Each schedule's own formula (bubble_formula's): ZB-H1's was labelled 1F1B's beside ZB-H1's value.
  const std::string formula_text = two_bw ? "1 − S·n(F+B)/(S(n(F+B)+(p−1)F)+(p−1)B)"
                                   : cap.kind == ScheduleKind::zb_h1 ? "(p−1)(F+B−W)/(n(F+B+W)+(p−1)(F+B−W))"
                                                                     : std::string("(p−1)/(") + (m > 1 ? "m·" : "") + "n+p−1)";
  out << "<text x='16' y='50' class='sub'>bubble " << num(100 * sim.bubble)
      << (cap.measured ? "% measured in the trace, " : "% simulated, ") << num(100 * formula) << "% by " << formula_text
      << " · total time " << num(sim.total_time)
      << " · forward " << num(cap.options.forward_time) << ", backward " << num(cap.options.backward_time)
      << " per stage" << (cap.options.p2p_latency > 0 ? ", p2p latency " + num(cap.options.p2p_latency) : "")
      << "</text>\n";
  out << "<text x='16' y='70' class='sub'>boxes: micro-batch number (from 0" << (cap.steps > 1 ? ", over the run" : "")
      << ") · empty lane: idle (the bubble) · right: peak activations held, in micro-batches of L/p layers"
      << (cap.steps > 1 ? " · dashed: a step's end (the trainer's collectives)" : "") << "</text>\n";

  // Time grid behind the lanes.
  const double step = tick_step(total, 12);
  for (double t = 0; t <= total + 1e-9; t += step) {
    const double x = kLeft + t * scale;
    out << "<line x1='" << num(x) << "' y1='" << num(kTop - 4) << "' x2='" << num(x) << "' y2='"
        << num(kTop + rows_h + 4) << "' class='grid'/><text x='" << num(x) << "' y='" << num(kTop + rows_h + 18)
        << "' class='tick'>" << num(t) << "</text>\n";
  }
  out << "<text x='" << num(kLeft + plot_w / 2) << "' y='" << num(kTop + rows_h + 34) << "' class='tick'>time</text>\n";
  for (double end : sim.step_ends)
    out << "<line x1='" << num(kLeft + end * scale) << "' y1='" << num(kTop - 8) << "' x2='" << num(kLeft + end * scale)
        << "' y2='" << num(kTop + rows_h + 8) << "' stroke='#c0392b' stroke-width='1.5' stroke-dasharray='5,3'/>\n";

  for (int r = 0; r < p; ++r) {
    const RankTimeline& line = sim.ranks[size_t(r)];
    const double y = kTop + r * (kRowH + kRowGap);
    out << "<text x='" << num(kLeft - 10) << "' y='" << num(y + kRowH / 2) << "' class='rank'>rank " << r
        << "</text>\n";
    out << "<rect x='" << num(kLeft) << "' y='" << num(y) << "' width='" << num(plot_w) << "' height='" << num(kRowH)
        << "' class='lane'/>\n";
    for (const TimedAction& ta : line.actions) {
      const Action& a = ta.action;
      const double x = kLeft + ta.start * scale, w = (ta.end - ta.start) * scale;
      out << "<g><title>rank " << r << ' ' << xml_escape(describe_action(a, m)) << " · stage " << a.stage << " · " << num(ta.start)
          << "–" << num(ta.end) << "</title><rect x='" << num(x) << "' y='" << num(y) << "' width='" << num(w)
          << "' height='" << num(kRowH) << "' rx='2' class='box' fill='" << box_fill(a.pass, a.chunk, m) << "'/>";
      if (w >= 9 + 6 * std::to_string(a.micro_batch).size())
        out << "<text x='" << num(x + w / 2) << "' y='" << num(y + kRowH / 2) << "' class='" << text_class(a.chunk, m)
            << "'>" << a.micro_batch << "</text>";
      out << "</g>\n";
    }
    out << "<text x='" << num(kLeft + plot_w + 10) << "' y='" << num(y + kRowH / 2) << "' class='peak'>peak "
        << (m > 1 ? num(line.peak_stage_equivalents) : std::to_string(line.peak_in_flight)) << "</text>\n";
  }

  // Legend: one swatch per (pass, chunk), for the passes drawn.
  double lx = kLeft;
  const double ly = kTop + rows_h + kAxisH + 2;
  bool split = false;
  for (const auto& line : sim.ranks)
    for (const auto& ta : line.actions) split = split || ta.action.pass == Pass::backward_weight;
  const std::vector<Pass> passes = split ? std::vector<Pass>{Pass::forward, Pass::backward_input, Pass::backward_weight}
                                         : std::vector<Pass>{Pass::forward, Pass::backward};
  for (Pass pass : passes)
    for (int c = 0; c < m; ++c) {
      const char* name = pass == Pass::forward           ? "forward"
                         : pass == Pass::backward        ? "backward"
                         : pass == Pass::backward_input  ? "input gradient (B)"
                                                         : "weight gradient (W)";
      const std::string label = std::string(name) + (m > 1 ? " chunk " + std::to_string(c) : "");
      out << "<rect x='" << num(lx) << "' y='" << num(ly) << "' width='16' height='14' rx='2' fill='"
          << box_fill(pass, c, m) << "'/><text x='" << num(lx + 21) << "' y='" << num(ly + 7) << "' class='legend'>"
          << label << "</text>\n";
      lx += 34 + 6.2 * double(label.size());
    }
  out << "</svg>\n";
  return out.str();
}

}  // namespace lattice::parallel::pipeline
