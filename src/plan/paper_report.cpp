#include "plan/paper_report.hpp"

#include <cstdio>
#include <filesystem>

#include "core/error.hpp"
#include "core/svg.hpp"
#include "plan/evaluate.hpp"
#include "plan/paper_models.hpp"
#include "plan/report.hpp"

namespace lattice::plan {

namespace {

// The rows of Table 2; `t` = 1 for the no-parallelism row.
struct Table2Row {
  const char* name;
  bool tp, sp, selective, full;
};
const Table2Row kTable2[] = {
    {"no parallelism", false, false, false, false},
    {"tensor parallel (TP)", true, false, false, false},
    {"TP + sequence parallel (SP)", true, true, false, false},
    {"TP + selective recompute", true, false, true, false},
    {"TP + SP + selective recompute", true, true, true, false},
    {"full recompute", true, false, false, true},
};

int64_t table2_bytes(const PaperModel& m, const Table2Row& row) {
  PlanRequest r = paper_request(m, Recompute::none, row.sp);
  if (!row.tp) r.layout.tp = 1;
  return analysis::layer_activation_bytes(activation_shape(r), row.full, row.selective);
}

// Configurations of figures 1 and 7 beyond the TP baseline.
struct Variant {
  const char* name;
  Recompute recompute;
  bool sp;
};
const Variant kFigure1[] = {{"TP baseline", Recompute::none, false},
                            {"TP + SP + selective", Recompute::selective, true},
                            {"full recompute", Recompute::full, false}};
const Variant kFigure7[] = {{"sequence parallel", Recompute::none, true},
                            {"selective recompute", Recompute::selective, false},
                            {"SP + selective", Recompute::selective, true},
                            {"full recompute", Recompute::full, false}};

double activation_share_of_baseline(const PaperModel& m, const Variant& v) {
  const auto base = activation_shape(paper_request(m, Recompute::none, false));
  const auto x = activation_shape(paper_request(m, v.recompute, v.sp));
  return double(analysis::layer_activation_bytes(x, v.recompute == Recompute::full,
                                                 v.recompute == Recompute::selective)) /
         double(analysis::layer_activation_bytes(base, false, false));
}

}  // namespace

Table5Row table5_row(size_t i, const Hardware& hw) {
  const PaperModel& m = paper_models().at(i);
  const Plan full = evaluate(paper_request(m, Recompute::full, false), hw);
  const Plan ours = evaluate(paper_request(m, Recompute::selective, true), hw, m.this_work_s, 312e12);
  Table5Row row;
  row.model = m.name;
  row.paper_full_s = m.full_recompute_s;
  row.paper_this_s = m.this_work_s;
  row.predicted_full_s = full.time.iteration_s;
  row.predicted_this_s = ours.time.iteration_s;
  row.paper_speedup = m.full_recompute_s / m.this_work_s - 1;
  row.predicted_speedup = row.predicted_full_s / row.predicted_this_s - 1;
  row.mfu = ours.use.mfu;
  row.hfu = ours.use.hfu;
  row.hfu_counted = ours.use.hfu_counted;
  return row;
}

std::string paper_text(const Hardware& hw) {
  const auto& models = paper_models();
  std::string out;
  char buf[256];

  out += "Table 2: activation bytes per layer, per rank (t = 8, s = 2048, bf16, the paper's micro-batch)\n";
  std::snprintf(buf, sizeof buf, "  %-32s", "configuration");
  out += buf;
  for (const auto& m : models) {
    std::snprintf(buf, sizeof buf, "%12s", m.name.c_str());
    out += buf;
  }
  out += "\n";
  for (const auto& row : kTable2) {
    std::snprintf(buf, sizeof buf, "  %-32s", row.name);
    out += buf;
    for (const auto& m : models) out += fmt("%9.1f MB", double(table2_bytes(m, row)) / 1e6);
    out += "\n";
  }

  out += "\nFigure 1: memory per GPU, first pipeline stage (GB; 80 GB available)\n";
  for (const auto& m : models)
    for (const auto& v : kFigure1) {
      const Plan p = evaluate(paper_request(m, v.recompute, v.sp), hw);
      std::snprintf(buf, sizeof buf, "  %-5s %-22s states %7.1f  activations %7.1f  total %7.1f  %s\n",
                    m.name.c_str(), v.name, double(p.memory.model_state.total()) / 1e9,
                    p.memory.first_stage_activation_bytes / 1e9, p.memory.total_bytes / 1e9,
                    p.memory.total_bytes <= 80e9 ? "fits" : "does not fit");
      out += buf;
    }

  out += "\nFigure 7: activation memory per layer as a share of the TP baseline\n";
  std::snprintf(buf, sizeof buf, "  %-5s %18s %20s %15s %15s\n", "model", "sequence parallel",
                "selective recompute", "SP + selective", "full recompute");
  out += buf;
  for (const auto& m : models) {
    std::snprintf(buf, sizeof buf, "  %-5s %17.1f%% %19.1f%% %14.1f%% %14.1f%%\n", m.name.c_str(),
                  100 * activation_share_of_baseline(m, kFigure7[0]),
                  100 * activation_share_of_baseline(m, kFigure7[1]),
                  100 * activation_share_of_baseline(m, kFigure7[2]),
                  100 * activation_share_of_baseline(m, kFigure7[3]));
    out += buf;
  }

  out += "\nTable 4 (" + hw.name + " calibration target): 22B per-layer ms, forward / backward\n";
  for (const auto& row : paper_table4()) {
    const LayerTime lt = layer_time(paper_request(models[0], row.recompute, row.sequence_parallel), hw);
    std::snprintf(buf, sizeof buf, "  %-26s paper %5.1f / %5.1f   model %5.2f / %5.2f\n", row.name.c_str(),
                  row.forward_ms, row.backward_ms, lt.forward_s * 1e3, lt.backward_s * 1e3);
    out += buf;
  }

  out += "\nTable 5: iteration seconds, paper vs the " + hw.name + " time model; MFU/HFU from the paper's times\n";
  std::snprintf(buf, sizeof buf, "  %-5s %22s %22s %18s %6s %6s %12s\n", "model", "full recompute",
                "SP + selective", "speed-up", "MFU", "HFU", "HFU counted");
  out += buf;
  for (size_t i = 0; i < models.size(); ++i) {
    const Table5Row r = table5_row(i, hw);
    std::snprintf(buf, sizeof buf,
                  "  %-5s %6.2f vs %6.2f %+5.1f%% %6.2f vs %6.2f %+5.1f%% %5.1f%% vs %5.1f%% %5.1f%% %5.1f%% %11.1f%%\n",
                  r.model.c_str(), r.paper_full_s, r.predicted_full_s,
                  100 * (r.predicted_full_s / r.paper_full_s - 1), r.paper_this_s, r.predicted_this_s,
                  100 * (r.predicted_this_s / r.paper_this_s - 1), 100 * r.paper_speedup,
                  100 * r.predicted_speedup, 100 * r.mfu, 100 * r.hfu, 100 * r.hfu_counted);
    out += buf;
  }
  out += "  (paper value first, then the model's; speed-up = full-recompute time / SP+selective time - 1)\n";
  return out;
}

nlohmann::ordered_json paper_json(const Hardware& hw) {
  nlohmann::ordered_json j;
  j["event"] = "paper";
  j["hardware"] = hw.name;
  j["table5"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < paper_models().size(); ++i) {
    const Table5Row r = table5_row(i, hw);
    j["table5"].push_back({{"model", r.model}, {"paper_full_recompute_s", r.paper_full_s},
                           {"paper_this_work_s", r.paper_this_s}, {"predicted_full_recompute_s", r.predicted_full_s},
                           {"predicted_this_work_s", r.predicted_this_s}, {"paper_speedup", r.paper_speedup},
                           {"predicted_speedup", r.predicted_speedup}, {"mfu", r.mfu}, {"hfu", r.hfu},
                           {"hfu_counted", r.hfu_counted}});
  }
  return j;
}

MoEPaperRow moe_paper_row(size_t i) {
  const MoEPaperModel& m = moe_paper_models().at(i);
  MoEPaperRow row;
  row.model = m.name;
  row.published = m.published_parameters;
  row.computed = double(m.model.num_params());
  row.relative_difference = row.computed / row.published - 1;
  row.bound = m.bound;
  row.moe_layers = m.model.moe_layers();
  row.experts_total = int64_t(row.moe_layers) * m.model.moe.experts;
  row.expert_parameters = analysis::all_expert_parameters(m.model);
  row.active_parameters = analysis::active_parameters(m.model);
  return row;
}

std::string moe_paper_text() {
  std::string out = "Published MoE configurations: parameters as published vs lattice's count of a decoder-only stand-in\n";
  char buf[320];
  std::snprintf(buf, sizeof buf, "  %-12s %12s %12s %11s %7s %12s %10s %8s %14s\n", "model", "published", "computed",
                "difference", "bound", "in experts", "MoE layers", "experts", "active/token");
  out += buf;
  for (size_t i = 0; i < moe_paper_models().size(); ++i) {
    const MoEPaperRow r = moe_paper_row(i);
    std::snprintf(buf, sizeof buf, "  %-12s %12.4g %12.4g %+10.2f%% %6.0f%% %12.4g %10d %8lld %14.4g\n", r.model.c_str(),
                  r.published, r.computed, 100 * r.relative_difference, 100 * r.bound, double(r.expert_parameters),
                  r.moe_layers, static_cast<long long>(r.experts_total), double(r.active_parameters));
    out += buf;
  }
  for (const MoEPaperModel& m : moe_paper_models()) {
    out += "\n" + m.name + " (" + m.source + ")\n";
    out += "  published: " + fmt("%.4g", m.published_parameters) + " parameters, " + m.published_where + "\n";
    out += "  shape: " + m.shape + "\n";
    out += "  compared: " + m.compared + "\n";
  }
  return out;
}

nlohmann::ordered_json moe_paper_json() {
  nlohmann::ordered_json j;
  j["event"] = "moe_paper";
  j["models"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < moe_paper_models().size(); ++i) {
    const MoEPaperRow r = moe_paper_row(i);
    const MoEPaperModel& m = moe_paper_models()[i];
    j["models"].push_back({{"model", r.model}, {"source", m.source}, {"published_parameters", r.published},
                           {"computed_parameters", r.computed}, {"relative_difference", r.relative_difference},
                           {"bound", r.bound}, {"expert_parameters", r.expert_parameters},
                           {"moe_layers", r.moe_layers}, {"experts_total", r.experts_total},
                           {"active_parameters", r.active_parameters},
                           {"stand_in", {{"layers", m.model.layers}, {"hidden", m.model.hidden},
                                         {"heads", m.model.heads}, {"seq_len", m.model.seq_len},
                                         {"vocab", m.model.vocab}, {"experts", m.model.moe.experts},
                                         {"layer_freq", m.model.moe.layer_freq},
                                         {"ffn_hidden", m.model.ffn_hidden()},
                                         {"router", to_string(m.model.moe.router)}, {"topk", m.model.moe.k()}}}});
  }
  return j;
}

BarChart figure1_chart() {
  BarChart c;
  c.title = "Figure 1: memory per GPU (first pipeline stage)";
  c.y_label = "GB";
  c.stacks = {"weights + gradients + optimizer", "activations"};
  for (const auto& v : kFigure1) c.bars.push_back(v.name);
  const Hardware hw = hardware_preset("A100-80GB");  // a copy: g++ 13 warns of the name's temporary
  for (const auto& m : paper_models()) {
    c.groups.push_back(m.name);
    c.values.emplace_back();
    for (const auto& v : kFigure1) {
      const Plan p = evaluate(paper_request(m, v.recompute, v.sp), hw);
      c.values.back().push_back({double(p.memory.model_state.total()) / 1e9, p.memory.first_stage_activation_bytes / 1e9});
    }
  }
  c.reference = 80;
  c.reference_label = "80 GB (A100)";
  return c;
}

BarChart figure7_chart() {
  BarChart c;
  c.title = "Figure 7: activation memory as a share of the TP baseline";
  c.y_label = "% of tensor-parallel baseline";
  c.stacks = {"share"};
  for (const auto& v : kFigure7) c.bars.push_back(v.name);
  for (const auto& m : paper_models()) {
    c.groups.push_back(m.name);
    c.values.emplace_back();
    for (const auto& v : kFigure7) c.values.back().push_back({100 * activation_share_of_baseline(m, v)});
  }
  return c;
}

std::vector<std::string> paper_svg_paths(const std::string& dir) {
  return {(std::filesystem::path(dir) / "figure1.svg").string(), (std::filesystem::path(dir) / "figure7.svg").string()};
}

void write_paper_svgs(const std::string& dir, const OutputRules& rules) {
  const std::vector<std::string> paths = paper_svg_paths(dir);
  for (const std::string& path : paths) check_output_path(path, OutputKind::svg, "--svg", rules);  // both before either
  const BarChart charts[] = {figure1_chart(), figure7_chart()};
  for (size_t i = 0; i < paths.size(); ++i)
    write_output_file(paths[i], OutputKind::svg, "--svg", svg::signed_document(render_svg(charts[i])), rules);
}

}  // namespace lattice::plan
