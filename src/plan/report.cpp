#include "plan/report.hpp"

#include <algorithm>
#include <cstdio>

#include "core/recompute_plan.hpp"
#include "core/stage_partition.hpp"
#include "plan/segment_table.hpp"

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

namespace {
// --recompute full: each stage's uniform segment lengths (plan/segment_table.hpp, docs/design.md §4).
std::string segments_text(const PlanRequest& r) {
  std::string out;
  for (const StageSegments& t : segment_table(r)) {
    out += "\nrecompute segments, stage " + std::to_string(t.stage) + " (" + std::to_string(t.layers) +
           " layers a chunk; input I " + format_bytes(t.I) + ", a re-run layer A " + format_bytes(t.A) + ")\n";
    out += "  k* = sqrt(n*I/A) = " + fmt("%.2f", t.k_star) + " layers a segment, d* = sqrt(n*A/I) = " +
           fmt("%.2f", t.d_star) + " segments; Chen's sqrt(n) = " + fmt("%.2f", t.chen) + " (only when A = I)\n";
    out += "     k   kept (K)       accounted peak\n";
    for (const SegmentRow& row : t.rows) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  %4d   %-14s %s%s\n", row.k, format_bytes(row.kept).c_str(),
                    format_bytes(row.peak).c_str(), row.least ? "  <- least" : "");
      out += buf;
    }
  }
  return out;
}
}  // namespace

std::string describe_layout(const PlanRequest& r) {
  const LayoutConfig& l = r.layout;
  char buf[160];
  std::string ep;  // MoE models: the expert-parallel size
  if (r.model.moe.enabled()) ep = " ep=" + std::to_string(l.ep);
  // c in Megatron-Core's group order (tp, cp, dp, pp), named only when the layout splits sequences.
  // With how its ranks share attention: the ring or Ulysses' all-to-alls.
  const std::string cp = l.cp > 1 ? " c=" + std::to_string(l.cp) + (l.cp_comm == CpComm::p2p ? "/ring" : "/a2a") : "";
  std::snprintf(buf, sizeof buf, "t=%d%s p=%d m=%d dp=%d%s b=%d%s %s", l.tp, cp.c_str(), l.pp, l.virtual_stages, l.dp,
                ep.c_str(), r.micro_batch, l.sequence_parallel ? " sp" : "", to_string(l.recompute));
  std::string s = buf;
  if (!l.stage_layers.empty()) s.insert(s.find(" m="), " [" + layer_counts_text(l.stage_layers) + "]");
  if (!l.recompute_plan.empty()) {
    s.replace(s.rfind(to_string(l.recompute)), std::string(to_string(l.recompute)).size(),
              "plan[" + recompute_plan_text(l.recompute_plan) + "]");
  } else if (l.recompute == Recompute::full && l.recompute_method == RecomputeMethod::uniform) {
    std::snprintf(buf, sizeof buf, "/uniform(%d)", l.recompute_layers);
    s += buf;
  } else if (l.recompute == Recompute::full && l.recompute_layers >= 0) {
    std::snprintf(buf, sizeof buf, "(%d)", l.recompute_layers);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, " zero%d", l.zero);
  return s + buf + (r.zero_bubble ? " zb-h1" : r.pipedream_2bw ? " 2bw" : r.gpipe ? " gpipe" : "") + (l.fused_attention() ? " fused-attn" : "") +
         (l.pack_masks ? " packed-masks" : "") +
         (l.fp8_kept ? " fp8-kept" : "");
}

std::string plan_text(const Plan& p, const Hardware& hw) {
  const PlanRequest& r = p.request;
  const MemoryPlan& m = p.memory;
  const TimePlan& t = p.time;
  const MoEConfig& moe = r.model.moe;
  const LayoutConfig& l = r.layout;
  std::string out;
  out += "model   L=" + std::to_string(r.model.layers) + " h=" + std::to_string(r.model.hidden) +
         " a=" + std::to_string(r.model.heads) + " s=" + std::to_string(r.model.seq_len) +
         " v=" + std::to_string(r.model.padded_vocab(r.layout.tp)) + "  (" +
         fmt("%.3g", double(r.model.num_params())) + " parameters)\n";
  if (moe.enabled()) {
    const int M = r.model.moe_layers();
    out += "MoE     E=" + std::to_string(moe.experts) + " experts of f=" + std::to_string(r.model.ffn_hidden()) +
           (moe.layer_freq == 1 ? std::string(" in every layer")
                                : " in layers i % " + std::to_string(moe.layer_freq) + " == 0") +
           " (" + std::to_string(M) + " MoE layers), " + to_string(moe.router) + " router, k=" + std::to_string(moe.k()) +
           (moe.capacity_factor > 0 ? fmt(", capacity factor %g", moe.capacity_factor) : std::string(", no dropping")) +
           (moe.groups > 1 ? ", " + std::to_string(moe.groups) + " routing groups" : std::string()) + "\n";
    const int64_t experts = analysis::all_expert_parameters(r.model);
    out += "        parameters: " + fmt("%.4g", double(r.model.num_params())) + " = " + fmt("%.4g", double(experts)) +
           " in experts + " + fmt("%.4g", double(r.model.num_params() - experts)) + " dense; " +
           fmt("%.4g", double(analysis::active_parameters(r.model))) + " active per token\n";
  }
  out += "layout  " + describe_layout(r) + " on " + std::to_string(r.gpus) + " x " + hw.name + ", " +
         std::to_string(r.micro_batches()) + " micro-batches of " + std::to_string(r.micro_batch) +
         ", activations " + to_string(r.layout.activation_dtype) +
         (l.fused_attention() ? ", fused attention (log-sum-exp kept, no s² tensor)" : "") + "\n\n";

  out += "memory per rank (first pipeline stage)\n";
  out += line("activations per layer (Table 2)", format_bytes(double(m.activation_bytes_per_layer)));
  if (moe.enabled())
    out += line("activations per MoE layer (balanced)", format_bytes(double(m.moe_layer_activation_bytes)));
  out += line("activations, stage layers (eq. 5)", format_bytes(m.first_stage_layer_bytes));
  out += line("activations outside the layers", format_bytes(double(m.extra_activation_bytes)));
  out += line("parameters on this shard", fmt("%.4g", double(m.shard_parameters)));
  if (moe.enabled()) {
    out += line("  dense", fmt("%.4g", double(m.dense_parameters)) + "  (gradients reduced over the " +
                               std::to_string(l.dp_cp()) + (l.cp > 1 ? " DP x CP ranks)" : " DP ranks)"));
    out += line("  experts: " + std::to_string(moe.experts / l.ep) + " of " + std::to_string(moe.experts) + " x " +
                    std::to_string(m.first_stage_moe_layers) + " MoE layers",
                fmt("%.4g", double(m.expert_parameters)) + "  (over the " + std::to_string(l.dp_cp() / l.ep) +
                    " expert-DP ranks)");
  }
  out += line("weights", format_bytes(double(m.model_state.params)));
  out += line("gradients", format_bytes(double(m.model_state.grads)));
  out += line("optimizer states", format_bytes(double(m.model_state.optimizer)));
  out += line("total", format_bytes(m.total_bytes) + " of " + format_bytes(double(m.capacity_bytes)) +
                           (m.fits() ? "  (fits)" : "  (DOES NOT FIT)"));
  for (size_t stage = 0; stage < m.by_stage.size(); ++stage) {
    const analysis::CategoryBytes& c = m.by_stage[stage];
    out += "\nevery byte, stage " + std::to_string(stage) + " (what the run's summary measures by category)\n";
    out += line("activations", format_bytes(double(c.activations)));
    out += line("model states", format_bytes(double(c.model_states)) +
                                    (c.model_states_transient ? "  (of which ZeRO transient " +
                                                                     format_bytes(double(c.model_states_transient)) + ")"
                                                              : std::string()));
    out += line("workspaces", format_bytes(double(c.workspaces)));
    if (c.communication) out += line("communication", format_bytes(double(c.communication)));
    if (c.pipeline) out += line("pipeline", format_bytes(double(c.pipeline)));
    out += line("data", format_bytes(double(c.data)) + (r.data_bytes ? "" : "  (token files not counted: --data)"));
    if (c.checkpoint_io) out += line("checkpoint I/O", format_bytes(double(c.checkpoint_io)));
    if (c.offload_io)
      out += line("offload staging", format_bytes(double(c.offload_io)) + "  (moments on disk: " +
                                          format_bytes(double(c.offload_disk_bytes)) + ")");
    out += line("accounted peak", format_bytes(double(c.accounted())) + "  (+ the runtime: libraries, threads, MPI)");
    // The verdict above is the paper's count unless --memory-budget made it this one: say where they part.
    if (!m.accounted_capacity && c.accounted_peak > m.capacity_bytes)
      out += line("", "past the " + format_bytes(double(m.capacity_bytes)) +
                          ": a lattice rank would not fit ('total' above counts as the paper does)");
  }

  out += segments_text(r);

  out += "\nFLOPs per iteration\n";
  if (moe.enabled()) {
    out += line("active parameters per token", fmt("%.4g", double(analysis::active_parameters(r.model))));
    out += line("forward FLOPs per token", fmt("%.4g", analysis::forward_flops_per_token(r.model)));
    out += line("model (3 x forward x tokens)", fmt("%.4g", p.flops.model_flops));
  } else {
    out += line("model (eq. 7)", fmt("%.4g", p.flops.model_flops));
    out += line("hardware (eq. 8 form)", fmt("%.4g", p.flops.hardware_flops));
  }
  out += line("hardware (counted)", fmt("%.4g", p.flops.hardware_flops_counted));

  out += "\npredicted time per iteration\n";
  out += line("GEMMs", seconds_and_share(t.gemm_s, t.iteration_s));
  out += line("element-wise kernels", seconds_and_share(t.elementwise_s, t.iteration_s));
  out += line("recomputation", seconds_and_share(t.recompute_s, t.iteration_s));
  out += line(std::string("TP communication (") + to_string(t.tp_algorithm) + ")",
              seconds_and_share(t.tp_comm_s, t.iteration_s));
  if (moe.enabled())
    out += line("expert all-to-all (EP " + std::to_string(l.ep) + (l.ep > 1 ? ", pairwise)" : ")"),
                seconds_and_share(t.ep_comm_s, t.iteration_s));
  if (l.cp > 1)
    out += line(l.cp_comm == CpComm::p2p ? "CP ring (p2p, c " + std::to_string(l.cp) + ", exposed)"
                                         : "CP all-to-all (Ulysses, c " + std::to_string(l.cp) +
                                               (moe.enabled() ? "; + router logits gathered)" : ")"),
                seconds_and_share(t.cp_comm_s, t.iteration_s));
  out += line("PP point-to-point", seconds_and_share(t.pp_comm_s, t.iteration_s));
  out += line(fmt("pipeline bubble (%.1f%%)", 100 * t.bubble_fraction), seconds_and_share(t.bubble_s, t.iteration_s));
  out += line(std::string("DP / ZeRO communication (") + to_string(t.dp_algorithm) + ")",
              seconds_and_share(t.dp_comm_s, t.iteration_s));
  if (moe.enabled()) out += line("  of which expert-DP", seconds_and_share(t.expert_dp_comm_s, t.iteration_s));
  out += line("optimizer step", seconds_and_share(t.optimizer_s, t.iteration_s));
  if (t.offload_s > 0) out += line("weight pieces read from disk", seconds_and_share(t.offload_s, t.iteration_s));
  out += line("iteration", fmt("%10.4f s", t.iteration_s));

  out += "\nutilisation (" + std::string(p.use.measured ? "measured" : "predicted") +
         fmt(" %.4g s", p.use.iteration_s) + fmt(", peak %.4g FLOP/s per device)\n", p.use.peak_flops);
  out += line("MFU", fmt("%.1f%%", 100 * p.use.mfu));
  if (!moe.enabled()) out += line("HFU (paper's eq. 8)", fmt("%.1f%%", 100 * p.use.hfu));
  out += line("HFU (counted)", fmt("%.1f%%", 100 * p.use.hfu_counted));
  if (moe.enabled()) {
    const analysis::MoEKeptShape k = moe_kept_shape(r);
    const int64_t C = analysis::expert_capacity(moe, k.s * k.b / moe.groups);
    out += "\nnote: the MoE figures assume balanced experts: this rank routes A = " + std::to_string(k.assignments) +
           " assignments a micro-batch (" +
           (C ? "capacity " + std::to_string(C) + " tokens per expert" : std::string("no dropping")) +
           ") and its experts receive A rows. ";
    if (m.moe_received_rows_max > k.received)
      out += "The most loaded rank of a real run can receive more, up to " + std::to_string(m.moe_received_rows_max) +
             " rows: " + format_bytes(double(m.moe_layer_activation_bytes_max)) + " per MoE layer instead of " +
             format_bytes(double(m.moe_layer_activation_bytes)) + ".\n";
    else
      out += "The capacity caps what the most loaded rank's experts can receive at the same A rows.\n";
  }
  return out;
}

nlohmann::ordered_json category_bytes_json(const analysis::CategoryBytes& c) {
  return {{"activations", c.activations}, {"model_states", c.model_states},
          {"model_states_transient", c.model_states_transient}, {"communication", c.communication},
          {"pipeline", c.pipeline}, {"workspaces", c.workspaces}, {"data", c.data},
          {"checkpoint_io", c.checkpoint_io}, {"offload_io", c.offload_io},
          {"offload_disk_bytes", c.offload_disk_bytes}, {"accounted_peak_bytes", c.accounted()}};
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
  // Whether every stage's accounted peak is within the memory too (what --memory-budget decides by),
  // where "fits" may be the paper's count of activations and model states; absent where not modelled.
  if (!p.memory.by_stage.empty()) {
    bool accounted_fits = true;
    for (const analysis::CategoryBytes& c : p.memory.by_stage) accounted_fits &= c.accounted_peak <= p.memory.capacity_bytes;
    j["fits_accounted"] = accounted_fits;
  }
  j["shard_parameters"] = p.memory.shard_parameters;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const analysis::CategoryBytes& c : p.memory.by_stage)
    stages.push_back(category_bytes_json(c));
  j["memory_by_stage"] = stages;
  j["parameters"] = r.model.num_params();
  j["active_parameters"] = analysis::active_parameters(r.model);
  j["forward_flops_per_token"] = analysis::forward_flops_per_token(r.model);
  j["layout"] = {{"tp", l.tp}, {"cp", l.cp}, {"cp_comm", to_string(l.cp_comm)}, {"pp", l.pp}, {"virtual_stages", l.virtual_stages}, {"dp", l.dp}, {"ep", l.ep},
                 {"sequence_parallel", l.sequence_parallel}, {"recompute", to_string(l.recompute)},
                 {"recompute_layers", l.recompute_layers}, {"recompute_method", to_string(l.recompute_method)},
                 {"recompute_plan", recompute_plan_text(layer_recompute(l, r.model.layers))}, {"zero", l.zero},
                 {"attention", to_string(l.attention)},
                 {"micro_batch", r.micro_batch}, {"micro_batches", r.micro_batches()},
                 {"pipeline_layers", layer_counts_text(StagePartition::of(l, r.model.layers).counts())},
                 {"schedule", r.zero_bubble     ? "zb-h1"
                              : r.pipedream_2bw ? "pipedream-2bw"
                              : r.gpipe         ? "gpipe"
                              : l.virtual_stages > 1 ? "interleaved"
                                                     : "1f1b"}};
  // The forward FLOPs backward re-runs in an iteration, over every rank (docs/design.md §4).
  const analysis::ActivationShape x = activation_shape(r);
  double recompute_flops = 0;
  for (LayerRecompute mode : layer_recompute(l, r.model.layers)) recompute_flops += analysis::layer_recompute_flops(x, mode);
  j["recompute_flops"] = recompute_flops * l.tp * l.cp * double(r.micro_batches()) * l.dp;  // every rank's
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  for (const StageSegments& t : segment_table(r)) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const SegmentRow& row : t.rows)
      rows.push_back({{"k", row.k}, {"kept_bytes", row.kept}, {"peak_bytes", row.peak}, {"least", row.least}});
    segments.push_back({{"stage", t.stage}, {"layers", t.layers}, {"input_bytes", t.I}, {"live_bytes", t.A},
                        {"k_star", t.k_star}, {"d_star", t.d_star}, {"chen_sqrt_n", t.chen}, {"rows", rows}});
  }
  j["segment_table"] = segments;
  j["memory_stage"] = p.memory.stage;  // the stage the "first stage" figures describe (uneven: the heaviest)
  const TimePlan& t = p.time;
  j["time_breakdown_s"] = {{"gemm", t.gemm_s}, {"elementwise", t.elementwise_s},
                           {"recompute", t.recompute_s}, {"tp_comm", t.tp_comm_s}, {"ep_comm", t.ep_comm_s},
                           {"cp_comm", t.cp_comm_s},
                           {"pp_comm", t.pp_comm_s}, {"bubble", t.bubble_s}, {"dp_comm", t.dp_comm_s},
                           {"optimizer", t.optimizer_s}, {"offload", t.offload_s}};
  j["tp_algorithm"] = to_string(t.tp_algorithm);
  j["dp_algorithm"] = to_string(t.dp_algorithm);
  const MoEConfig& moe = r.model.moe;
  if (moe.enabled()) {
    const analysis::MoEKeptShape k = moe_kept_shape(r);
    const MemoryPlan& m = p.memory;
    j["expert_dp_comm_s"] = t.expert_dp_comm_s;
    j["moe"] = {{"experts", moe.experts}, {"layer_freq", moe.layer_freq}, {"moe_layers", r.model.moe_layers()},
                {"first_stage_moe_layers", m.first_stage_moe_layers}, {"topk", moe.k()},
                {"router", to_string(moe.router)}, {"capacity_factor", moe.capacity_factor},
                {"groups", moe.groups}, {"ffn_hidden", r.model.ffn_hidden()},
                {"capacity", analysis::expert_capacity(moe, k.s * k.b / moe.groups)},
                {"assignments_per_micro_batch", k.assignments},
                {"balanced_experts", true},
                {"activation_bytes_per_moe_layer", m.moe_layer_activation_bytes},
                {"received_rows_max", m.moe_received_rows_max},
                {"activation_bytes_per_moe_layer_max", m.moe_layer_activation_bytes_max},
                {"dense_parameters", m.dense_parameters}, {"expert_parameters", m.expert_parameters},
                {"all_to_all_bytes", analysis::moe_all_to_all_bytes(k.assignments, k.h, l.ep)},
                {"all_to_alls_per_step", int64_t(analysis::kMoEAllToAllsPerLayer) * m.first_stage_moe_layers *
                                             r.micro_batches()}};
  }
  return j;
}

std::string search_text(const std::vector<Plan>& ranked, size_t considered, double seconds) {
  std::string out = fmt("searched %.0f layouts", double(considered)) + fmt(" in %.3f s; ", seconds) +
                    std::to_string(ranked.size()) + " shown, fastest first\n\n";
  char buf[320];
  int width = 46;  // wider when a layout (with ep=) needs it
  for (const Plan& p : ranked) width = std::max(width, int(describe_layout(p.request).size()));
  // CP: the context-parallel size c of each layout (its sequences split over c ranks), beside t in the layout.
  std::snprintf(buf, sizeof buf, "%-4s %-*s %3s %10s %10s %10s %8s %8s %8s %7s\n", "rank", width, "layout", "CP",
                "memory", "states", "activ.", "iter s", "bubble", "comm s", "MFU");
  out += buf;
  int rank = 1;
  for (const Plan& p : ranked) {
    const TimePlan& t = p.time;
    std::snprintf(buf, sizeof buf, "%-4d %-*s %3d %10s %10s %10s %8.3f %7.1f%% %8.3f %6.1f%%\n", rank++, width,
                  describe_layout(p.request).c_str(), p.request.layout.cp, format_bytes(p.memory.total_bytes).c_str(),
                  format_bytes(double(p.memory.model_state.total())).c_str(),
                  format_bytes(p.memory.first_stage_activation_bytes).c_str(), t.iteration_s,
                  100 * t.bubble_fraction, t.tp_comm_s + t.ep_comm_s + t.cp_comm_s + t.pp_comm_s + t.dp_comm_s,
                  100 * p.use.mfu);
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
