#include "plan/report.hpp"

#include <cstdio>

namespace lattice::plan {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

namespace {
std::string line(const std::string& label, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-40s %s\n", label.c_str(), value.c_str());
  return buf;
}
std::string seconds_and_share(double s, double total) {
  return fmt("%10.4f s", s) + fmt("  %5.1f%%", total > 0 ? 100 * s / total : 0);
}
}  // namespace

std::string format_bytes(double bytes) {
  if (bytes >= 1e9) return fmt("%.2f GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt("%.2f MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt("%.2f kB", bytes / 1e3);
  return fmt("%.0f B", bytes);
}

std::string describe_layout(const PlanRequest& r) {
  const LayoutConfig& l = r.layout;
  char buf[160];
  std::snprintf(buf, sizeof buf, "t=%d p=%d m=%d dp=%d b=%d%s %s", l.tp, l.pp, l.virtual_stages, l.dp,
                r.micro_batch, l.sequence_parallel ? " sp" : "", to_string(l.recompute));
  std::string s = buf;
  if (l.recompute == Recompute::full && l.recompute_layers >= 0) {
    std::snprintf(buf, sizeof buf, "(%d)", l.recompute_layers);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, " zero%d", l.zero);
  return s + buf;
}

std::string plan_text(const Plan& p, const Hardware& hw) {
  const PlanRequest& r = p.request;
  const MemoryPlan& m = p.memory;
  const TimePlan& t = p.time;
  std::string out;
  out += "model   L=" + std::to_string(r.model.layers) + " h=" + std::to_string(r.model.hidden) +
         " a=" + std::to_string(r.model.heads) + " s=" + std::to_string(r.model.seq_len) +
         " v=" + std::to_string(r.model.padded_vocab(r.layout.tp)) + "  (" +
         fmt("%.3g", double(r.model.num_params())) + " parameters)\n";
  out += "layout  " + describe_layout(r) + " on " + std::to_string(r.gpus) + " x " + hw.name + ", " +
         std::to_string(r.micro_batches()) + " micro-batches of " + std::to_string(r.micro_batch) +
         ", activations " + to_string(r.layout.activation_dtype) + "\n\n";

  out += "memory per rank (first pipeline stage)\n";
  out += line("activations per layer (Table 2)", format_bytes(double(m.activation_bytes_per_layer)));
  out += line("activations, stage layers (eq. 5)", format_bytes(m.first_stage_layer_bytes));
  out += line("activations outside the layers", format_bytes(double(m.extra_activation_bytes)));
  out += line("parameters on this shard", fmt("%.4g", double(m.shard_parameters)));
  out += line("weights", format_bytes(double(m.model_state.params)));
  out += line("gradients", format_bytes(double(m.model_state.grads)));
  out += line("optimizer states", format_bytes(double(m.model_state.optimizer)));
  out += line("total", format_bytes(m.total_bytes) + " of " + format_bytes(double(m.capacity_bytes)) +
                           (m.fits() ? "  (fits)" : "  (DOES NOT FIT)"));

  out += "\nFLOPs per iteration\n";
  out += line("model (eq. 7)", fmt("%.4g", p.flops.model_flops));
  out += line("hardware (eq. 8 form)", fmt("%.4g", p.flops.hardware_flops));
  out += line("hardware (counted)", fmt("%.4g", p.flops.hardware_flops_counted));

  out += "\npredicted time per iteration\n";
  out += line("GEMMs", seconds_and_share(t.gemm_s, t.iteration_s));
  out += line("element-wise kernels", seconds_and_share(t.elementwise_s, t.iteration_s));
  out += line("recomputation", seconds_and_share(t.recompute_s, t.iteration_s));
  out += line(std::string("TP communication (") + to_string(t.tp_algorithm) + ")",
              seconds_and_share(t.tp_comm_s, t.iteration_s));
  out += line("PP point-to-point", seconds_and_share(t.pp_comm_s, t.iteration_s));
  out += line(fmt("pipeline bubble (%.1f%%)", 100 * t.bubble_fraction), seconds_and_share(t.bubble_s, t.iteration_s));
  out += line(std::string("DP / ZeRO communication (") + to_string(t.dp_algorithm) + ")",
              seconds_and_share(t.dp_comm_s, t.iteration_s));
  out += line("optimizer step", seconds_and_share(t.optimizer_s, t.iteration_s));
  out += line("iteration", fmt("%10.4f s", t.iteration_s));

  out += "\nutilisation (" + std::string(p.use.measured ? "measured" : "predicted") +
         fmt(" %.4g s", p.use.iteration_s) + fmt(", peak %.4g FLOP/s per device)\n", p.use.peak_flops);
  out += line("MFU", fmt("%.1f%%", 100 * p.use.mfu));
  out += line("HFU (paper's eq. 8)", fmt("%.1f%%", 100 * p.use.hfu));
  out += line("HFU (counted)", fmt("%.1f%%", 100 * p.use.hfu_counted));
  return out;
}

nlohmann::ordered_json plan_json(const Plan& p) {
  const PlanRequest& r = p.request;
  const LayoutConfig& l = r.layout;
  nlohmann::ordered_json j;
  j["event"] = "plan";
  j["activation_bytes_per_layer"] = p.memory.activation_bytes_per_layer;
  j["activation_bytes_first_stage_layers"] = p.memory.first_stage_layer_bytes;
  j["activation_bytes_first_stage"] = p.memory.first_stage_activation_bytes;
  j["model_state_bytes"] = p.memory.model_state.total();
  j["model_flops"] = p.flops.model_flops;
  j["hardware_flops"] = p.flops.hardware_flops;
  j["hardware_flops_counted"] = p.flops.hardware_flops_counted;
  j["mfu"] = p.use.mfu;
  j["hfu"] = p.use.hfu;
  j["hfu_counted"] = p.use.hfu_counted;
  j["predicted_iteration_s"] = p.time.iteration_s;
  j["utilisation_from"] = p.use.measured ? "measured" : "predicted";
  j["total_bytes"] = p.memory.total_bytes;
  j["gpu_memory_bytes"] = p.memory.capacity_bytes;
  j["fits"] = p.memory.fits();
  j["shard_parameters"] = p.memory.shard_parameters;
  j["layout"] = {{"tp", l.tp}, {"pp", l.pp}, {"virtual_stages", l.virtual_stages}, {"dp", l.dp},
                 {"sequence_parallel", l.sequence_parallel}, {"recompute", to_string(l.recompute)},
                 {"recompute_layers", l.recompute_layers}, {"zero", l.zero},
                 {"micro_batch", r.micro_batch}, {"micro_batches", r.micro_batches()}};
  const TimePlan& t = p.time;
  j["time_breakdown_s"] = {{"gemm", t.gemm_s}, {"elementwise", t.elementwise_s},
                           {"recompute", t.recompute_s}, {"tp_comm", t.tp_comm_s},
                           {"pp_comm", t.pp_comm_s}, {"bubble", t.bubble_s}, {"dp_comm", t.dp_comm_s},
                           {"optimizer", t.optimizer_s}};
  j["tp_algorithm"] = to_string(t.tp_algorithm);
  j["dp_algorithm"] = to_string(t.dp_algorithm);
  return j;
}

std::string search_text(const std::vector<Plan>& ranked, size_t considered, double seconds) {
  std::string out = fmt("searched %.0f layouts", double(considered)) + fmt(" in %.3f s; ", seconds) +
                    std::to_string(ranked.size()) + " shown, fastest first\n\n";
  char buf[320];
  std::snprintf(buf, sizeof buf, "%-4s %-46s %10s %10s %10s %8s %8s %8s %7s\n", "rank", "layout", "memory",
                "states", "activ.", "iter s", "bubble", "comm s", "MFU");
  out += buf;
  int rank = 1;
  for (const Plan& p : ranked) {
    const TimePlan& t = p.time;
    std::snprintf(buf, sizeof buf, "%-4d %-46s %10s %10s %10s %8.3f %7.1f%% %8.3f %6.1f%%\n", rank++,
                  describe_layout(p.request).c_str(), format_bytes(p.memory.total_bytes).c_str(),
                  format_bytes(double(p.memory.model_state.total())).c_str(),
                  format_bytes(p.memory.first_stage_activation_bytes).c_str(), t.iteration_s,
                  100 * t.bubble_fraction, t.tp_comm_s + t.pp_comm_s + t.dp_comm_s, 100 * p.use.mfu);
    out += buf;
  }
  if (ranked.empty()) out += "no layout fits\n";
  return out;
}

nlohmann::ordered_json search_json(const std::vector<Plan>& ranked, size_t considered, double seconds) {
  nlohmann::ordered_json j;
  j["event"] = "plan_search";
  j["layouts_considered"] = considered;
  j["search_s"] = seconds;
  j["candidates"] = nlohmann::ordered_json::array();
  for (const Plan& p : ranked) j["candidates"].push_back(plan_json(p));
  return j;
}

}  // namespace lattice::plan
