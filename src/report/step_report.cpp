#include "report/step_report.hpp"

#include <algorithm>

#include <cstdio>

namespace lattice {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024.0 && u < 6) b /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

namespace {
// 75 -> "1:15", 3725 -> "1:02:05": durations as people read them.
std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}
}  // namespace

std::string bits_per_byte_note(double bits_per_byte) {
  if (!(bits_per_byte > 0)) return "";
  char buf[40];
  std::snprintf(buf, sizeof buf, " (%.3f bits/byte)", bits_per_byte);
  return buf;
}

void add_mfu_json(nlohmann::json& j, double mfu, double peak_flops, double peak_flops_total, const std::string& source) {
  const bool known = peak_flops_total > 0;
  j["mfu"] = known ? nlohmann::json(mfu) : nlohmann::json(nullptr);
  j["peak_flops"] = known ? nlohmann::json(peak_flops) : nlohmann::json(nullptr);
  j["peak_flops_total"] = known ? nlohmann::json(peak_flops_total) : nlohmann::json(nullptr);
  j["peak_source"] = source;
}

std::string mfu_text(double mfu, double peak_flops_total, const std::string& peak_short) {
  if (!(peak_flops_total > 0)) return "MFU n/a";  // the start line and the summary say why
  char buf[48];
  std::snprintf(buf, sizeof buf, "MFU %5.1f%% of ", mfu * 100.0);
  return buf + peak_short;
}

nlohmann::json step_json(const StepReport& r) {
  nlohmann::json j = {{"event", "step"},    {"step", r.step},
                      {"steps", r.steps},   {"loss", r.loss},
                      {"lr", r.lr},         {"elapsed_s", r.elapsed_s},
                      {"eta_s", r.eta_s},   {"grad_norm", r.grad_norm},
                      {"step_s", r.step_s}, {"tokens_per_s", r.tokens_per_s},
                      {"activation_peak_bytes", r.activation_peak_bytes}};
  add_mfu_json(j, r.mfu, r.peak_flops, r.peak_flops_total, r.peak_source);
  if (r.loss_scale > 0) j["loss_scale"] = r.loss_scale, j["skipped"] = r.skipped;
  if (r.update_of_step != r.step) j["update_of_step"] = r.update_of_step;  // lr and grad_norm are its
  if (r.bits_per_byte > 0) j["bits_per_byte"] = r.bits_per_byte;
  if (r.moe.active)
    j["moe_aux_loss"] = r.moe.aux_loss, j["moe_dropped_fraction"] = r.moe.dropped_fraction,
    j["moe_load_min"] = r.moe.load_min, j["moe_load_max"] = r.moe.load_max;
  return j;
}

void print_step_line(const StepReport& r) {
  const std::string bpb = bits_per_byte_note(r.bits_per_byte);
  char update[96];  // the update this step applied, where it is not its own batch's
  if (r.update_of_step == r.step) std::snprintf(update, sizeof update, "lr %.2e  |g| %.3f", r.lr, r.grad_norm);
  else if (r.update_of_step == 0) std::snprintf(update, sizeof update, "no update this step");
  else std::snprintf(update, sizeof update, "lr %.2e  |g| %.3f (step %lld's update)", r.lr, r.grad_norm,
                     (long long)r.update_of_step);
  std::fprintf(stderr, "step %5lld/%lld  loss %.4f%s  %s  %7.1f ms  %8.0f tok/s  %s  act %s",
               (long long)r.step, (long long)r.steps, r.loss, bpb.c_str(), update, r.step_s * 1e3, r.tokens_per_s,
               mfu_text(r.mfu, r.peak_flops_total, r.peak_short).c_str(), human_bytes(double(r.activation_peak_bytes)).c_str());
  if (r.loss_scale > 0) std::fprintf(stderr, "  scale %g%s", r.loss_scale, r.skipped ? " (inf/NaN: step skipped, scale halved)" : "");
  if (r.moe.active)
    std::fprintf(stderr, "  aux %.4f  drop %.1f%%  load %lld-%lld", r.moe.aux_loss, r.moe.dropped_fraction * 100.0,
                 (long long)r.moe.load_min, (long long)r.moe.load_max);
  std::fprintf(stderr, "  %s elapsed, ETA %s\n", clock_text(r.elapsed_s).c_str(), clock_text(r.eta_s).c_str());
}

nlohmann::json memory_json(const MemoryReport& m) {
  nlohmann::json j = {{"rank", m.rank},
          {"tp_rank", m.tp_rank},
          {"pp_rank", m.pp_rank},
          {"dp_rank", m.dp_rank},
          {"activation_bytes_per_layer", m.activation_bytes_per_layer},
          {"activation_bytes_per_layer_formula", m.activation_bytes_per_layer_formula},
          {"activation_bytes_outside_layers", m.activation_bytes_outside_layers},
          {"activation_bytes_outside_layers_formula", m.activation_bytes_outside_formula},
          {"activation_bytes_by_op", m.activation_bytes_by_op},
          {"activation_peak_bytes", m.activation_peak_bytes},
          {"model_state_bytes", {{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer}}},
          {"model_state_bytes_formula",
           {{"params", m.params_formula}, {"grads", m.grads_formula}, {"optimizer", m.optimizer_formula}}},
          {"transient_peak_bytes", m.transient_peak_bytes},
          {"model_state_peak_bytes", m.model_state_peak_bytes},
          {"compute_weight_bytes", m.compute_weights}};
  if (!m.moe_assignments.empty()) j["moe_assignments"] = m.moe_assignments, j["moe_received"] = m.moe_received;
  nlohmann::json categories = nlohmann::json::object();
  for (const auto& [name, bytes] : m.category_peak_bytes) categories[name] = bytes;
  j["category_peak_bytes"] = categories;
  j["accounted_peak_bytes"] = m.accounted_peak_bytes;
  nlohmann::json at_peak = nlohmann::json::object();
  for (const auto& [name, bytes] : m.accounted_peak_by_category) at_peak[name] = bytes;
  j["accounted_peak_by_category"] = at_peak;
  j["reserved_peak_bytes"] = m.reserved_peak_bytes;
  j["ram_reserved_peak_bytes"] = m.ram_reserved_peak_bytes;
  if (m.rss_peak_bytes > 0) {  // 0: the OS did not say (no /proc)
    j["rss_peak_bytes"] = m.rss_peak_bytes;
    j["unaccounted_bytes"] = m.unaccounted_bytes();
  }
  return j;
}

void print_memory_table(const MemoryReport& m) {
  std::fprintf(stderr, "memory (measured by the tracking allocator; formula = docs/design.md §4):\n");
  std::fprintf(stderr, "  %-8s %14s %14s %8s\n", "layer", "kept bytes", "formula", "ratio");
  for (size_t l = 0; l < m.activation_bytes_per_layer.size(); ++l) {
    const double meas = double(m.activation_bytes_per_layer[l]), form = double(m.activation_bytes_per_layer_formula[l]);
    std::fprintf(stderr, "  %-8zu %14s %14s %8.4f\n", l, human_bytes(meas).c_str(), human_bytes(form).c_str(),
                 form > 0 ? meas / form : 0.0);
  }
  std::fprintf(stderr, "  kept by op (measured):");
  int col = 0;
  for (const auto& [tag, bytes] : m.activation_bytes_by_op)
    std::fprintf(stderr, "%s%s %s", col++ % 4 ? ", " : "\n    ", tag.c_str(), human_bytes(double(bytes)).c_str());
  std::fprintf(stderr, "\n");
  std::fprintf(stderr, "  outside  %14s %14s\n", human_bytes(double(m.activation_bytes_outside_layers)).c_str(),
               human_bytes(double(m.activation_bytes_outside_formula)).c_str());
  std::fprintf(stderr, "  activation peak %s; model states: params %s, grads %s, optimizer %s (docs/design.md §8: %s, %s, %s)",
               human_bytes(double(m.activation_peak_bytes)).c_str(), human_bytes(double(m.params)).c_str(),
               human_bytes(double(m.grads)).c_str(), human_bytes(double(m.optimizer)).c_str(),
               human_bytes(double(m.params_formula)).c_str(), human_bytes(double(m.grads_formula)).c_str(),
               human_bytes(double(m.optimizer_formula)).c_str());
  if (m.transient_peak_bytes) std::fprintf(stderr, "; ZeRO transient peak %s", human_bytes(double(m.transient_peak_bytes)).c_str());
  std::fprintf(stderr, "\n  every byte (peaks since start):");
  for (const auto& [name, bytes] : m.category_peak_bytes)
    if (bytes) std::fprintf(stderr, " %s %s,", name.c_str(), human_bytes(double(bytes)).c_str());
  std::fprintf(stderr, " all at once %s (", human_bytes(double(m.accounted_peak_bytes)).c_str());
  const char* sep = "";
  for (const auto& [name, bytes] : m.accounted_peak_by_category)
    if (bytes) std::fprintf(stderr, "%s%s %s", sep, name.c_str(), human_bytes(double(bytes)).c_str()), sep = ", ";
  std::fprintf(stderr, "); reserved %s", human_bytes(double(m.reserved_peak_bytes)).c_str());
  if (m.ram_reserved_peak_bytes != m.reserved_peak_bytes)  // a GPU's blocks: not the process's RAM
    std::fprintf(stderr, " (in the process's RAM %s)", human_bytes(double(m.ram_reserved_peak_bytes)).c_str());
  if (m.rss_peak_bytes > 0)
    std::fprintf(stderr, "; peak RSS %s, of which %s not accounted (runtime)\n", human_bytes(double(m.rss_peak_bytes)).c_str(),
                 human_bytes(double(m.unaccounted_bytes())).c_str());
  else
    std::fprintf(stderr, "; peak RSS unknown (the OS does not report it)\n");
}

void print_comm_report(const nlohmann::json& comm_ranks) {
  std::fprintf(stderr, "communication, last step (bytes sent; ring accounting: all-reduce 2(t-1)/t·n, "
                       "reduce-scatter and all-gather (t-1)/t·n each, send n):\n");
  std::fprintf(stderr, "  %-6s %14s %14s %14s   %s\n", "rank", "tp", "dp", "pp",
               "tp through f, f̄, g, ḡ / SP re-gathers");
  for (const auto& r : comm_ranks)
    std::fprintf(stderr, "  %-6d %14s %14s %14s   %s / %s\n", r["rank"].get<int>(),
                 human_bytes(r["tp"].get<double>()).c_str(), human_bytes(r["dp"].get<double>()).c_str(),
                 human_bytes(r["pp"].get<double>()).c_str(), human_bytes(r["tp_conjugate"].get<double>()).c_str(),
                 human_bytes(r["tp_regather"].get<double>()).c_str());
  for (const auto& r : comm_ranks)
    if (r["dp_wait_s"].get<double>() > 0)
      std::fprintf(stderr, "  rank %d blocked %.1f ms on data-parallel gradient reductions and ZeRO gathers (this MPI backend runs them at issue)\n",
                   r["rank"].get<int>(), r["dp_wait_s"].get<double>() * 1e3);
  for (const auto& r : comm_ranks)
    if (r.contains("ep") && r["ep_formula_balanced"].get<double>() > 0)
      std::fprintf(stderr, "  rank %d: ep all-to-all %s (balanced routing: 4·(e-1)/e·A·h·4 per MoE layer and micro-batch = %s), "
                           "expert-dp %s\n",
                   r["rank"].get<int>(), human_bytes(r["ep"].get<double>()).c_str(),
                   human_bytes(r["ep_formula_balanced"].get<double>()).c_str(),
                   human_bytes(r["expert_dp"].get<double>()).c_str());
  for (const auto& r : comm_ranks)
    if (r.contains("cp") && r.value("cp_comm", "") == "p2p")
      std::fprintf(stderr, "  rank %d: cp ring %s (K, V pairs passed on: (3c-2 + c-1 per re-run layer)·2·b·(s/c)·h/t·4 "
                           "per layer and micro-batch, its stage's = %s)\n",
                   r["rank"].get<int>(), human_bytes(r["cp"].get<double>()).c_str(),
                   human_bytes(r["cp_formula"].get<double>()).c_str());
    else if (r.contains("cp"))
      std::fprintf(stderr, "  rank %d: cp all-to-all %s (Ulysses: (8 + fused + 4 per re-run layer)·(c-1)/c·b·(s/c)·h/t·4 "
                           "per layer and micro-batch, its stage's = %s)\n",
                   r["rank"].get<int>(), human_bytes(r["cp"].get<double>()).c_str(),
                   human_bytes(r["cp_formula"].get<double>()).c_str());
  if (!comm_ranks.empty())
    std::fprintf(stderr, "  formulas of rank 0's stage and its last step's passes: tp (4L+2)·2(t-1)/t·sbh·4 a micro-batch "
                         "(a stage: its layers and end) = %s; dp (N-1)/N·4·(2Ψ an update, ZeRO-2 Ψ a backward + Ψ an "
                         "update, ZeRO-3 3Ψ a micro-batch) = %s\n",
                 human_bytes(comm_ranks[0]["tp_conjugate_formula"].get<double>()).c_str(),
                 human_bytes(comm_ranks[0]["dp_formula"].get<double>()).c_str());
}

}  // namespace lattice
