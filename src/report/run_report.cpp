#include "report/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/chart.hpp"
#include "core/error.hpp"
#include "core/html_page.hpp"
#include "core/machine_peak.hpp"
#include "report/run_report_sections.hpp"
#include "report/schedule_svg.hpp"
#include "report/step_report.hpp"
#include "report/trace_timeline.hpp"

namespace lattice {

namespace {

using nlohmann::json;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double number(const json& j, const char* key) {
  if (!j.is_object()) return kNaN;
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

// A member, or null when the record lacks it (const operator[] would not check).
const json& field(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object()) return null_value;
  const auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

std::string text_of(double v, const char* format = "%.4g") {
  if (!std::isfinite(v)) return "–";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string bytes_text(double v) { return std::isfinite(v) ? human_bytes(v) : "–"; }

std::string ratio_text(double measured, double formula) {
  return formula > 0 && std::isfinite(measured) ? text_of(measured / formula, "%.4f") : "–";
}

// A series of one field of the step (or eval) records over the step number.
chart::Series series_of(const std::vector<json>& records, const char* key, const std::string& name,
                        double scale = 1, size_t skip = 0) {
  chart::Series s{name, {}, {}, false};
  for (size_t i = skip; i < records.size(); ++i) {
    s.x.push_back(number(records[i], "step"));
    s.y.push_back(number(records[i], key) * scale);
  }
  return s;
}

bool has_field(const std::vector<json>& records, const char* key) {
  for (const auto& r : records)
    if (std::isfinite(number(r, key))) return true;
  return false;
}

std::string line_chart(const std::string& title, const std::string& y_label, std::vector<chart::Series> series) {
  chart::LineChart c;
  c.title = title, c.x_label = "step", c.y_label = y_label, c.series = std::move(series);
  c.width = 560;
  return html::chart_block(chart::render_svg(c));
}

std::string overview(const RunRecords& run) {
  const json& st = run.start;
  const json& last = run.steps.empty() ? json() : run.steps.back();
  html::Table t;
  auto row = [&](const std::string& k, const std::string& v) { t.rows.push_back({k, v}); };
  const double steps = number(last, "steps");
  row("status", run.summary.is_null()
                    ? "running: step " + text_of(number(last, "step"), "%.0f") + " of " + text_of(steps, "%.0f")
                    : "finished: " + text_of(number(run.summary, "steps"), "%.0f") + " steps");
  if (st.is_object()) {
    const json& m = st.value("model", json::object());
    const json& l = st.value("layout", json::object());
    row("model", text_of(number(st, "parameters"), "%.0f") + " parameters: " + text_of(number(m, "layers"), "%.0f") +
                     " layers, hidden " + text_of(number(m, "hidden"), "%.0f") + ", " +
                     text_of(number(m, "heads"), "%.0f") + " heads, sequence " + text_of(number(m, "seq_len"), "%.0f") +
                     ", vocabulary " + text_of(number(m, "vocab"), "%.0f"));
    row("layout", "t=" + text_of(number(l, "tp"), "%.0f") + " p=" + text_of(number(l, "pp"), "%.0f") +
                      " dp=" + text_of(number(l, "dp"), "%.0f") + (l.value("sequence_parallel", false) ? " sp" : "") +
                      ", recompute " + l.value("recompute", std::string("?")) + ", ZeRO " +
                      text_of(number(l, "zero"), "%.0f") + ", activations " + l.value("activation_dtype", std::string("?")) +
                      ", schedule " + l.value("schedule", std::string("?")) + ", " +
                      text_of(number(st, "world"), "%.0f") + " rank(s) × " + text_of(number(st, "threads"), "%.0f") +
                      " thread(s)");
    row("batch", text_of(number(st, "micro_batch"), "%.0f") + " sequences a micro-batch, " +
                     text_of(number(st, "global_batch"), "%.0f") + " a step");
    if (st.contains("settings") && st["settings"].is_string()) row("settings", st["settings"].get<std::string>());
  }
  row("loss", text_of(run.steps.empty() ? kNaN : number(run.steps.front(), "loss")) + " → " + text_of(number(last, "loss")) +
                  (std::isfinite(number(last, "bits_per_byte")) ? " (" + text_of(number(last, "bits_per_byte")) + " bits/byte)" : ""));
  if (!run.evals.empty())
    row("validation loss", text_of(number(run.evals.back(), "loss")) + " at step " +
                               text_of(number(run.evals.back(), "step"), "%.0f") +
                               (std::isfinite(number(run.evals.back(), "bits_per_byte"))
                                    ? " (" + text_of(number(run.evals.back(), "bits_per_byte")) + " bits/byte)"
                                    : ""));
  const json& rate = run.summary.is_null() ? last : run.summary;
  row("throughput", text_of(number(rate, "tokens_per_s"), "%.0f") + " tokens/s, MFU " +
                        text_of(100 * number(rate, "mfu"), "%.1f") + "%" +
                        (run.summary.is_null() ? " (last step)" : " (mean after the first step)"));
  // The MFU's peak and where it came from (docs/mfu.md); runs logged before it was recorded have none.
  const json& source_field = field(rate, "peak_source");
  const std::string source = source_field.is_string() ? source_field.get<std::string>() : "";
  if (std::isfinite(number(rate, "peak_flops")))
    row("MFU peak", flops_text(number(rate, "peak_flops")) + " a rank" +
                        (number(rate, "peak_flops_total") > number(rate, "peak_flops")
                             ? ", " + flops_text(number(rate, "peak_flops_total")) + " over the ranks"
                             : "") +
                        ": " + source);
  else if (!source.empty())
    row("MFU peak", source);
  row("elapsed", text_of(number(last, "elapsed_s"), "%.1f") + " s");
  return html::render(t);
}

std::string curves(const RunRecords& run) {
  // The first step warms caches: left out of the rate charts when there are others.
  const size_t warm = run.steps.size() > 2 ? 1 : 0;
  std::string s = "<div class=\"charts\">";
  std::vector<chart::Series> loss = {series_of(run.steps, "loss", "train")};
  if (!run.evals.empty()) loss.push_back(series_of(run.evals, "loss", "validation")), loss.back().markers = true;
  s += line_chart("Loss", "cross-entropy (nats a token)", loss);
  if (has_field(run.steps, "bits_per_byte")) {
    std::vector<chart::Series> bpb = {series_of(run.steps, "bits_per_byte", "train")};
    if (has_field(run.evals, "bits_per_byte"))
      bpb.push_back(series_of(run.evals, "bits_per_byte", "validation")), bpb.back().markers = true;
    s += line_chart("Bits per byte of text", "bits/byte", bpb);
  }
  s += line_chart("Learning rate", "lr", {series_of(run.steps, "lr", "lr")});
  s += line_chart("Gradient norm (before clipping)", "‖g‖", {series_of(run.steps, "grad_norm", "‖g‖")});
  s += line_chart("Throughput", "tokens/s", {series_of(run.steps, "tokens_per_s", "tokens/s", 1, warm)});
  if (has_field(run.steps, "mfu"))  // no peak known: no MFU to draw
    s += line_chart("Model FLOPs utilisation", "MFU (%)", {series_of(run.steps, "mfu", "MFU", 100, warm)});
  if (has_field(run.steps, "loss_scale"))
    s += line_chart("fp16 loss scale", "scale", {series_of(run.steps, "loss_scale", "scale")});
  if (has_field(run.steps, "moe_aux_loss"))
    s += line_chart("MoE routing", "share / loss",
                    {series_of(run.steps, "moe_aux_loss", "aux loss"),
                     series_of(run.steps, "moe_dropped_fraction", "dropped share")});
  return s + "</div>\n";
}

// The planner's prediction for a rank (start record: per stage, and the checkpoint writer's).
const json* predicted_for(const RunRecords& run, const json& rank) {
  if (!run.start.is_object() || !run.start.contains("predicted_memory")) return nullptr;
  const bool writer = number(rank, "rank") == 0 && run.start.value("save", false);
  for (const auto& p : field(run.start, "predicted_memory"))
    if (number(p, "stage") == number(rank, "pp_rank") && p.value("writer", false) == writer) return &p;
  return nullptr;
}

std::string memory(const RunRecords& run) {
  if (run.summary.is_null()) return html::paragraph("Measured at the end of the run: not yet.", "note");
  const json& ranks = field(field(run.summary, "memory"), "ranks");
  std::vector<std::string> categories;
  for (const auto& [name, bytes] : field(ranks.at(0), "category_peak_bytes").items()) categories.push_back(name);
  chart::BarChart c;
  c.title = "Peak bytes by category, each rank: measured (tracking allocator) and predicted (planner)";
  c.y_label = "MiB";
  c.bars = {"measured", "predicted"};
  c.stacks = categories;
  html::Table t;
  t.header = {"rank", "stage"};
  for (const auto& k : categories) t.header.push_back(k);
  t.header.insert(t.header.end(), {"accounted peak", "reserved", "peak RSS", "unaccounted"});
  bool any_prediction = false;
  for (const auto& r : ranks) {
    const std::string rank = text_of(number(r, "rank"), "%.0f");
    const json* p = predicted_for(run, r);
    any_prediction = any_prediction || p;
    c.groups.push_back("rank " + rank);
    std::vector<double> measured, predicted;
    std::vector<std::string> cells = {rank, text_of(number(r, "pp_rank"), "%.0f")}, formula = {"", "predicted"};
    for (const auto& k : categories) {
      const double m = number(field(r, "category_peak_bytes"), k.c_str());
      const double f = p ? number(field(*p, "bytes"), k.c_str()) : kNaN;
      measured.push_back(m / 1048576), predicted.push_back(std::isfinite(f) ? f / 1048576 : 0);
      cells.push_back(bytes_text(m)), formula.push_back(bytes_text(f));
    }
    c.values.push_back({measured, predicted});
    for (const char* k : {"accounted_peak_bytes", "reserved_peak_bytes", "rss_peak_bytes", "unaccounted_bytes"})
      cells.push_back(bytes_text(number(r, k)));
    formula.insert(formula.end(), {p ? bytes_text(number(field(*p, "bytes"), "accounted_peak_bytes")) : "–", "", "", ""});
    t.rows.push_back(cells);
    if (p) t.rows.push_back(formula);
  }
  std::string s = html::chart_block(chart::render_svg(c));
  if (!any_prediction)
    s += html::paragraph("No prediction in this log (a run without a start record, or a layout the per-category "
                         "model does not cover, such as MoE): the predicted bars are empty.", "note");
  s += html::paragraph("Unaccounted = peak RSS − reserved: libraries, threads, MPI and allocator metadata, which the "
                       "tracking allocator does not see (docs/design.md §4).", "note");
  return s + html::render(t);
}

// Which of Table 2's terms an op's kept tensor belongs to (docs/design.md §3).
const char* table2_term(const std::string& op) {
  for (const char* r : {"ln1_input", "ln2_input", "qkv_input", "fc1_input", "resid1_mask", "resid2_mask"})
    if (op == r) return "replicated (sbh terms)";
  for (const char* r : {"q", "k", "v", "qkv", "proj_input", "gelu_input", "fc2_input"})
    if (op == r) return "divided by t";
  for (const char* r : {"softmax", "attn_mask", "attn_dropout", "attn_lse"})
    if (op == r) return "attention (as² terms)";
  return "beyond Table 2";
}

std::string activations(const RunRecords& run) {
  if (run.summary.is_null()) return html::paragraph("Measured at the end of the run: not yet.", "note");
  html::Table layers;
  layers.header = {"rank", "layer", "kept bytes (measured)", "formula", "measured / formula"};
  for (const auto& r : field(field(run.summary, "memory"), "ranks")) {
    const json& meas = field(r, "activation_bytes_per_layer");
    const json& form = field(r, "activation_bytes_per_layer_formula");
    for (size_t l = 0; l < meas.size(); ++l) {
      const double m = meas[l].get<double>(), f = l < form.size() ? form[l].get<double>() : kNaN;
      layers.rows.push_back({text_of(number(r, "rank"), "%.0f"), std::to_string(l), bytes_text(m), bytes_text(f), ratio_text(m, f)});
    }
    const double om = number(r, "activation_bytes_outside_layers"), of = number(r, "activation_bytes_outside_layers_formula");
    layers.rows.push_back({text_of(number(r, "rank"), "%.0f"), "outside layers", bytes_text(om), bytes_text(of), ratio_text(om, of)});
  }
  layers.caption = "Kept for backward, per layer of each rank's stage (local layer index)";
  std::string s = html::render(layers);
  const json& rank0 = field(field(run.summary, "memory"), "ranks").at(0);
  const json& by_op = field(rank0, "activation_bytes_by_op_first_layer");
  if (by_op.empty()) return s;
  html::Table ops;
  ops.header = {"op", "kept bytes (measured)", "Table 2 term"};
  std::map<std::string, double> term_sum;
  for (const auto& [op, bytes] : by_op.items()) {
    ops.rows.push_back({op, bytes_text(bytes.get<double>()), table2_term(op)});
    term_sum[table2_term(op)] += bytes.get<double>();
  }
  ops.caption = "Rank 0's first layer by op, one micro-batch";
  s += html::render(ops);
  const json& parts = field(rank0, "activation_parts_formula");
  html::Table terms;
  terms.header = {"Table 2 term (rank 0's first layer)", "measured", "formula", "measured / formula"};
  const std::pair<const char*, const char*> names[] = {
      {"replicated (sbh terms)", "replicated"}, {"divided by t", "tp_divided"}, {"attention (as² terms)", "attention"}};
  for (const auto& [term, key] : names) {
    const double f = number(parts, key);
    terms.rows.push_back({term, bytes_text(term_sum[term]), bytes_text(f), ratio_text(term_sum[term], f)});
  }
  terms.rows.push_back({"beyond Table 2 (LayerNorm statistics)", bytes_text(term_sum["beyond Table 2"]), "–", "–"});
  return s + html::render(terms);
}

std::string communication(const RunRecords& run) {
  if (run.summary.is_null()) return html::paragraph("Measured at the end of the run: not yet.", "note");
  const json& ranks = field(field(run.summary, "comm"), "ranks");
  // Each rank's formula is its own stage's, for the passes it ran in the last step. A log of an
  // older lattice has only the formula per layer: times the rank's layers, as that version drew it.
  const double tp_per_layer = number(field(run.summary, "comm"), "tp_bytes_per_layer_formula");
  const json& memory_ranks = field(field(run.summary, "memory"), "ranks");
  html::Table groups;
  groups.header = {"rank", "tp sent", "tp conjugate operators", "formula (the rank's stage)", "ratio", "dp sent",
                   "dp formula", "ratio", "pp sent", "ep sent", "ep formula (balanced)", "dp wait (s)"};
  chart::BarChart c;
  c.title = "Bytes sent in the last step, by group";
  c.y_label = "MiB";
  c.bars = {"sent"};
  for (const auto& r : ranks)  // every group any rank sent on (tp, dp, pp, embedding, ep, ...)
    for (const auto& [group, by_op] : field(r, "by_op").items())
      if (std::find(c.stacks.begin(), c.stacks.end(), group) == c.stacks.end()) c.stacks.push_back(group);
  html::Table ops;
  ops.header = {"rank", "group", "operator", "calls", "bytes sent (ring accounting)", "payload bytes"};
  for (const auto& r : ranks) {
    const std::string rank = text_of(number(r, "rank"), "%.0f");
    double layers = kNaN;
    for (const auto& m : memory_ranks)
      if (number(m, "rank") == number(r, "rank")) layers = double(field(m, "activation_bytes_per_layer").size());
    const double tp_formula = r.contains("tp_conjugate_formula") ? number(r, "tp_conjugate_formula") : tp_per_layer * layers;
    const double conjugate = number(r, "tp_conjugate");
    groups.rows.push_back({rank, bytes_text(number(r, "tp")), bytes_text(conjugate), bytes_text(tp_formula),
                           ratio_text(conjugate, tp_formula), bytes_text(number(r, "dp")),
                           bytes_text(number(r, "dp_formula")), ratio_text(number(r, "dp"), number(r, "dp_formula")),
                           bytes_text(number(r, "pp")), bytes_text(number(r, "ep")),
                           bytes_text(number(r, "ep_formula_balanced")), text_of(number(r, "dp_wait_s"), "%.4f")});
    std::vector<double> stack;
    for (const auto& k : c.stacks) {
      double sent = 0;
      for (const auto& [op, e] : field(field(r, "by_op"), k.c_str()).items()) sent += std::max(0.0, number(e, "sent_bytes"));
      stack.push_back(sent / 1048576);
    }
    c.groups.push_back("rank " + rank);
    c.values.push_back({stack});
    for (const auto& [group, by_op] : field(r, "by_op").items())
      for (const auto& [op, e] : by_op.items())
        ops.rows.push_back({rank, group, op, text_of(number(e, "calls"), "%.0f"), bytes_text(number(e, "sent_bytes")),
                            bytes_text(number(e, "payload_bytes"))});
  }
  groups.caption = "Bytes each rank sent in the last step (docs/design.md §5 ring accounting) beside the formulas; "
                   "the conjugate operators' formula counts the transformer layers only (the vocabulary-parallel "
                   "embedding and head add their own all-reduces)";
  html::Table per_layer;
  per_layer.header = {"rank 0 layer", "tp bytes (measured)", "formula", "ratio"};
  const json& rank0_layers = field(field(run.summary, "comm"), "rank0_tp_bytes_per_layer");
  for (size_t i = 0; i < rank0_layers.size(); ++i) {
    const double v = rank0_layers[i].get<double>();
    per_layer.rows.push_back({std::to_string(i), bytes_text(v), bytes_text(tp_per_layer), ratio_text(v, tp_per_layer)});
  }
  ops.caption = "By group and operator";
  if (ops.rows.empty()) return html::paragraph("Nothing was sent (one process).", "note") + html::render(groups);
  return html::chart_block(chart::render_svg(c)) + html::render(groups) +
         (tp_per_layer > 0 ? html::render(per_layer) : "") + html::render(ops);
}

// The timeline section; `problem`, when given, gets why the trace was not drawn ("" when it was).
std::string timeline(const RunRecords& run, const std::string& trace_path, std::string* problem = nullptr) {
  namespace pl = parallel::pipeline;
  const auto not_drawn = [&](const std::string& why, const std::string& text) {
    if (problem) *problem = why;
    return html::paragraph(text, "note");
  };
  if (problem) problem->clear();
  if (trace_path.empty())
    return html::paragraph("No trace: run lattice train with --trace FILE (or --report-dir DIR --trace DIR/trace.json) "
                           "to draw each rank's forwards and backwards.", "note");
  const json& l = field(run.start, "layout");
  // One row per rank of the trace (every world rank: TP and DP ranks of a stage run alike). The
  // counts come from the log: bounded before they size anything.
  const double world = number(run.start, "world"), m = number(l, "virtual_stages"), p = number(l, "pp"),
               n_mb = number(run.start, "micro_batches");
  if (!(world >= 1 && world <= 1024 && m >= 1 && m <= 64 && p >= 1 && p <= world && n_mb >= 1 && n_mb <= 4096))
    return not_drawn("the log does not say the layout it ran",
                     "The trace is not drawn: the log does not say the layout it ran (a start record with the "
                     "world size, stages and micro-batches).");
  const json& schedule = field(l, "schedule");
  try {
    const std::string schedule_name = schedule.is_string() ? schedule.get<std::string>() : "1f1b";
    const pl::ScheduleKind kind = pl::parse_schedule_kind(schedule_name);
    const json& id = field(run.start, "start_id");  // the last start's: a resume's own trace
    const TraceLayout ran{pl::schedule_name(kind), int(world), int(p), int(m), int(n_mb),
                          id.is_string() ? id.get<std::string>() : ""};
    const pl::Simulation sim = pl::timeline_from_trace(trace_path, ran, -1, true);
    pl::TimelineCaption caption{kind, int(p), int(n_mb), int(m), {}, 1};
    caption.measured = true;  // drawn from the run's trace
    std::string svg = pl::schedule_svg(sim, caption);
    const std::string idle = p > 1 ? "white gaps are the bubble (measured " : "white gaps are idle time (";
    return html::paragraph("The last step of " + trace_path + ", one row per rank; " + idle +
                               text_of(100 * sim.bubble, "%.1f") + "% of the ranks' time).", "note") +
           html::chart_block(svg);
  } catch (const InputError& e) {
    return not_drawn(e.what(), std::string("The trace could not be drawn: ") + e.what());
  }
}

}  // namespace

std::string run_report_html(const RunRecords& run, const std::string& trace_path, std::string* trace_problem) {
  html::Page page;
  page.title = "lattice run report";
  page.subtitle = run.start.is_object() && run.start.contains("settings") && run.start["settings"].is_string()
                      ? "lattice train " + run.start["settings"].get<std::string>()
                      : "lattice train";
  try {
    page.add("overview", "Overview", overview(run));
    page.add("curves", "Training curves", curves(run));
    page.add("memory", "Memory by category", memory(run));
    page.add("activations", "Kept activations by layer and op", activations(run));
    page.add("communication", "Communication", communication(run));
    page.add("step_time", "Step time by rank", step_time_section(run));
    if (!run.restarts.empty()) page.add("restarts", "Restarts (lattice launch)", restarts_section(run));
    page.add("timeline", "Pipeline timeline", timeline(run, trace_path, trace_problem));
  } catch (const json::exception& e) {
    throw InputError(std::string("the run's records are not lattice train's (a field has the wrong shape: ") + e.what() + ")");
  }
  return page.render();
}

}  // namespace lattice
