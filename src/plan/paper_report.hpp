#pragma once
// `lattice plan --paper`: the paper's Table 2, figures 1 and 7, Table 4 (calibration) and
// Table 5 (MFU/HFU from its times, and the time model's predictions against them).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/hardware.hpp"
#include "core/chart.hpp"
#include "core/output_path.hpp"

namespace lattice::plan {

using chart::BarChart;
using chart::render_svg;

// One Table 5 row: the paper's times next to the time model's.
struct Table5Row {
  std::string model;
  double paper_full_s, paper_this_s, predicted_full_s, predicted_this_s;
  double paper_speedup, predicted_speedup;  // full / this - 1 (fractions)
  double mfu, hfu, hfu_counted;             // from the paper's "this work" time, 312 TFLOP/s
};
Table5Row table5_row(size_t model_index, const Hardware& hw);

std::string paper_text(const Hardware& hw);
nlohmann::ordered_json paper_json(const Hardware& hw);  // {"event":"paper", "table5":[...]}

// `lattice plan --moe-paper`: the published MoE configurations' parameter counts against lattice's.
struct MoEPaperRow {
  std::string model;
  double published, computed;
  double relative_difference;  // computed / published − 1
  double bound;
  int64_t expert_parameters;   // all MoE layers' experts
  int moe_layers;
  int64_t experts_total;       // experts over all MoE layers
  int64_t active_parameters;   // per token
};
MoEPaperRow moe_paper_row(size_t model_index);
std::string moe_paper_text();
nlohmann::ordered_json moe_paper_json();  // {"event":"moe_paper", "models":[...]}

BarChart figure1_chart();  // model states + activations per GPU against 80 GB
BarChart figure7_chart();  // activation memory as % of the TP baseline
// figure1.svg and figure7.svg in `dir`.
std::vector<std::string> paper_svg_paths(const std::string& dir);
// Writes figure1.svg and figure7.svg into `dir` (created if missing) under the output rule
// (core/output_path.hpp) with `rules`; throws InputError before writing either if one is refused.
void write_paper_svgs(const std::string& dir, const OutputRules& rules = {});

}  // namespace lattice::plan
