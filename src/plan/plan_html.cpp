#include "plan/plan_html.hpp"

#include <cstdio>

#include "core/chart.hpp"
#include "core/html_page.hpp"
#include "plan/report.hpp"

namespace lattice::plan {

namespace {

// The iteration's parts, as TimePlan splits it (they add up to iteration_s).
struct TimePart {
  const char* name;
  double TimePlan::*seconds;
};
const TimePart kTimeParts[] = {{"GEMM", &TimePlan::gemm_s},
                               {"element-wise", &TimePlan::elementwise_s},
                               {"recompute", &TimePlan::recompute_s},
                               {"TP comm", &TimePlan::tp_comm_s},
                               {"EP all-to-all", &TimePlan::ep_comm_s},
                               {"CP comm", &TimePlan::cp_comm_s},
                               {"PP p2p", &TimePlan::pp_comm_s},
                               {"bubble", &TimePlan::bubble_s},
                               {"DP/ZeRO comm", &TimePlan::dp_comm_s},
                               {"optimizer", &TimePlan::optimizer_s},
                               {"offload I/O", &TimePlan::offload_s}};

// Categories as the tracking allocator names them (analysis/memory_categories.hpp).
struct CategoryPart {
  const char* name;
  int64_t analysis::CategoryBytes::*bytes;
};
const CategoryPart kCategories[] = {{"activations", &analysis::CategoryBytes::activations},
                                    {"model_states", &analysis::CategoryBytes::model_states},
                                    {"communication", &analysis::CategoryBytes::communication},
                                    {"pipeline", &analysis::CategoryBytes::pipeline},
                                    {"workspaces", &analysis::CategoryBytes::workspaces},
                                    {"data", &analysis::CategoryBytes::data},
                                    {"checkpoint_io", &analysis::CategoryBytes::checkpoint_io},
                                    {"offload_io", &analysis::CategoryBytes::offload_io}};

std::string seconds_text(double s) { return fmt("%.4g s", s); }

std::string overview(const Plan& p, const Hardware& hw) {
  const PlanRequest& r = p.request;
  html::Table t;
  t.rows = {{"layout", describe_layout(r) + " on " + std::to_string(r.gpus) + " × " + hw.name},
            {"model", fmt("%.0f", double(r.model.num_params())) + " parameters: " + std::to_string(r.model.layers) +
                          " layers, hidden " + std::to_string(r.model.hidden) + ", " + std::to_string(r.model.heads) +
                          " heads, sequence " + std::to_string(r.model.seq_len) + ", vocabulary " +
                          std::to_string(r.model.vocab)},
            {"batch", std::to_string(r.global_batch) + " sequences a step, " + std::to_string(r.micro_batches()) +
                          " micro-batches of " + std::to_string(r.micro_batch) + " a data-parallel rank"},
            {"memory (decisive stage)", format_bytes(p.memory.total_bytes) + " of " +
                                            format_bytes(double(p.memory.capacity_bytes)) +
                                            (p.memory.fits() ? ": fits" : ": does not fit")},
            {"iteration", seconds_text(p.time.iteration_s) + (p.use.measured ? " (measured)" : " (predicted)")},
            {"MFU / HFU", fmt("%.1f%%", 100 * p.use.mfu) + " / " + fmt("%.1f%%", 100 * p.use.hfu)}};
  return html::render(t);
}

std::string memory_section(const Plan& p) {
  if (p.memory.by_stage.empty())
    return html::paragraph("The per-category prediction does not cover this model (MoE): model states " +
                               format_bytes(double(p.memory.model_state.total())) + ", activations of the first stage " +
                               format_bytes(p.memory.first_stage_activation_bytes) + ".",
                           "note");
  chart::BarChart c;
  c.title = "Every byte of one rank, by pipeline stage";
  c.y_label = "GB";
  c.bars = {"predicted"};
  for (const auto& k : kCategories) c.stacks.push_back(k.name);
  html::Table t;
  t.header = {"stage"};
  for (const auto& k : kCategories) t.header.push_back(k.name);
  t.header.push_back("accounted peak");
  for (size_t s = 0; s < p.memory.by_stage.size(); ++s) {
    const analysis::CategoryBytes& b = p.memory.by_stage[s];
    c.groups.push_back("stage " + std::to_string(s));
    std::vector<double> stack;
    std::vector<std::string> row = {std::to_string(s)};
    for (const auto& k : kCategories) stack.push_back(double(b.*k.bytes) / 1e9), row.push_back(format_bytes(double(b.*k.bytes)));
    row.push_back(format_bytes(double(b.accounted())));
    c.values.push_back({stack});
    t.rows.push_back(row);
  }
  c.reference = double(p.memory.capacity_bytes) / 1e9;
  c.reference_label = "device memory " + format_bytes(double(p.memory.capacity_bytes));
  t.caption = "Each category's own peak; the accounted peak is all of them at one instant (less than the sum when "
              "ZeRO's buckets or a checkpoint's staging peak apart from the activations)";
  return html::chart_block(chart::render_svg(c)) + html::render(t);
}

std::string time_section(const Plan& p) {
  chart::BarChart c;
  c.title = "Predicted iteration, by part";
  c.y_label = "seconds";
  c.groups = {"this layout"};
  c.bars = {"predicted"};
  std::vector<double> stack;
  html::Table t;
  t.header = {"part", "seconds", "share"};
  for (const auto& part : kTimeParts) {
    const double s = p.time.*part.seconds;
    c.stacks.push_back(part.name), stack.push_back(s);
    t.rows.push_back({part.name, fmt("%.4g", s), fmt("%.1f%%", p.time.iteration_s > 0 ? 100 * s / p.time.iteration_s : 0)});
  }
  t.rows.push_back({"iteration", fmt("%.4g", p.time.iteration_s), "100%"});
  c.values.push_back({stack});
  return html::chart_block(chart::render_svg(c)) + html::render(t) +
         html::paragraph("Bubble fraction " + fmt("%.1f%%", 100 * p.time.bubble_fraction) + "; TP " +
                             to_string(p.time.tp_algorithm) + ", DP " + to_string(p.time.dp_algorithm) + ".",
                         "note");
}

html::Page page_of(const std::string& subtitle) {
  html::Page page;
  page.title = "lattice plan";
  page.subtitle = subtitle;
  return page;
}

}  // namespace

std::string plan_html(const Plan& p, const Hardware& hw) {
  html::Page page = page_of(describe_layout(p.request) + " on " + std::to_string(p.request.gpus) + " × " + hw.name);
  page.add("overview", "Overview", overview(p, hw));
  page.add("memory", "Memory by category and stage", memory_section(p));
  page.add("time", "Predicted time", time_section(p));
  return page.render();
}

std::string search_html(const std::vector<Plan>& ranked, size_t considered, double seconds) {
  html::Page page = page_of(std::to_string(considered) + " layouts considered in " + fmt("%.2f s", seconds) + "; the " +
                            std::to_string(ranked.size()) + " fastest that fit");
  if (ranked.empty()) {
    page.add("layouts", "Layouts", html::paragraph("No layout fits.", "note"));
    return page.render();
  }
  chart::BarChart c;
  c.title = "Predicted iteration of the top layouts, by part";
  c.y_label = "seconds";
  c.bars = {"predicted"};
  for (const auto& part : kTimeParts) c.stacks.push_back(part.name);
  html::Table t;
  t.header = {"rank", "layout", "iteration (s)", "MFU", "memory", "of"};
  const size_t drawn = std::min<size_t>(ranked.size(), 12);
  for (size_t i = 0; i < ranked.size(); ++i) {
    const Plan& p = ranked[i];
    t.rows.push_back({std::to_string(i + 1), describe_layout(p.request), fmt("%.4g", p.time.iteration_s),
                      fmt("%.1f%%", 100 * p.use.mfu), format_bytes(p.memory.total_bytes),
                      format_bytes(double(p.memory.capacity_bytes))});
    if (i >= drawn) continue;
    c.groups.push_back(fmt("#%.0f", double(i + 1)));
    std::vector<double> stack;
    for (const auto& part : kTimeParts) stack.push_back(p.time.*part.seconds);
    c.values.push_back({stack});
  }
  page.add("layouts", "Top layouts", html::chart_block(chart::render_svg(c)) + html::render(t));
  page.add("best", "The best layout: memory by category and stage", memory_section(ranked.front()));
  page.add("time", "The best layout: predicted time", time_section(ranked.front()));
  return page.render();
}

}  // namespace lattice::plan
