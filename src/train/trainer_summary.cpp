#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <omp.h>

#include "analysis/formulas.hpp"
#include "analysis/moe_formulas.hpp"
#include "comm/gather_int64.hpp"
#include "core/memory_limit.hpp"
#include "core/recompute_plan.hpp"
#include "core/version.hpp"
#include "report/step_report.hpp"
#include "backend/op_profile.hpp"
#include "tensor/device_memory.hpp"
#include "train/resume_settings.hpp"
#include "train/trainer.hpp"

// The end-of-run summary: every rank's measured memory and traffic gathered, the formulas beside.
namespace lattice {

namespace {
// A device with memory of its own (--device cuda; cpu-guarded's region): the tracked bytes beside
// what its allocator reports, so context and library memory are lines of their own, not guessed.
nlohmann::json device_memory_json() {
  const DeviceMemory& d = device_memory();
  if (!d.driver_used_bytes) return nullptr;
  const int64_t used = d.driver_used_bytes(), context = d.context_bytes ? d.context_bytes() : 0;
  const int64_t held = MemoryTracker::device_held_bytes();
  return {{"device", d.name},
          {"tracked_peak_bytes", MemoryTracker::device_peak_bytes()},
          {"held_bytes", held},
          {"held_peak_bytes", MemoryTracker::device_held_peak_bytes()},
          {"cublaslt_workspace_bytes", MemoryTracker::of(MemoryCategory::workspaces).live_bytes_of_op("cublaslt_workspace")},
          {"context_bytes", context},
          {"driver_used_bytes", used},
          {"untracked_bytes", used - context - held}};
}
// --profile-ops: each operation's calls and time over the timed steps (the first, warm-up step left
// out, as the step times leave it out), beside those steps' own time.
nlohmann::json op_profile_json() {
  if (!op_profile_enabled()) return nullptr;
  nlohmann::json ops = nlohmann::json::array();
  for (const OpTime& o : op_profile()) ops.push_back({{"op", o.op}, {"calls", o.calls}, {"seconds", o.seconds}});
  return ops;
}
void print_op_profile(const nlohmann::json& ops, double steps_s) {
  if (ops.is_null()) return;
  double total = 0;
  for (const auto& o : ops) total += o["seconds"].get<double>();
  std::fprintf(stderr, "  where the time went, by operation (--profile-ops; %.3f s in operations, the timed steps took %.3f s):\n",
               total, steps_s);
  for (const auto& o : ops) {
    const double sec = o["seconds"].get<double>();
    std::fprintf(stderr, "    %-26s %8lld calls %10.3f s %6.1f%%  %9.3f ms a call\n", o["op"].get<std::string>().c_str(),
                 o["calls"].get<long long>(), sec, total > 0 ? 100 * sec / total : 0.0,
                 1e3 * sec / double(std::max(1LL, o["calls"].get<long long>())));
  }
}
void print_device_memory(const nlohmann::json& j) {
  if (j.is_null()) return;
  const auto b = [&](const char* k) { return human_bytes(double(j[k].get<int64_t>())); };
  std::fprintf(stderr,
               "  device memory (%s): tracked peak %s; held from the device %s (peak %s; cuBLASLt workspace %s of it); "
               "context %s; the device reports %s in use, %s beyond context + held\n",
               j["device"].get<std::string>().c_str(), b("tracked_peak_bytes").c_str(), b("held_bytes").c_str(),
               b("held_peak_bytes").c_str(), b("cublaslt_workspace_bytes").c_str(), b("context_bytes").c_str(),
               b("driver_used_bytes").c_str(), b("untracked_bytes").c_str());
}
}  // namespace

namespace {

// Every rank's measured numbers, gathered to all ranks.
std::vector<std::vector<int64_t>> gather_rows(comm::Distributed* dist, const std::vector<int64_t>& mine) {
  if (!dist || dist->world_size() == 1) return {mine};
  return comm::all_gather_int64(dist->world(), mine);
}

std::string fmt_percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100);
  return buf;
}

}  // namespace

nlohmann::json Trainer::start_record(int world) const {
  const LayoutConfig& l = layout_;
  nlohmann::json model = {{"layers", model_config_.layers}, {"hidden", model_config_.hidden},
                          {"heads", model_config_.heads},   {"seq_len", model_config_.seq_len},
                          {"vocab", model_config_.vocab},   {"ffn_hidden", model_config_.ffn_hidden()},
                          {"experts", model_config_.moe.experts}};
  nlohmann::json layout = {{"tp", l.tp},
                           {"pp", l.pp},
                           {"dp", l.dp},
                           {"ep", l.ep},
                           {"cp", l.cp},
                           {"cp_comm", to_string(l.cp_comm)},
                           {"virtual_stages", l.virtual_stages},
                           {"sequence_parallel", l.sequence_parallel},
                           {"recompute", to_string(l.recompute)},
                           {"recompute_plan", recompute_plan_text(layer_recompute(l, model_config_.layers))},
                           {"zero", states_->zero_stage()},
                           {"activation_dtype", to_string(l.activation_dtype)},
                           {"params_dtype", to_string(l.params_dtype)},
                           {"attention", to_string(l.attention)},
                           {"schedule", config_.schedule},
                           {"stage_layers", l.stage_layers}};
  nlohmann::json j = {{"event", "start"},
                      {"lattice_version", version::kFull},
                      {"start_id", start_id_},
                      {"settings", config_.settings},
                      {"model", model},
                      {"layout", layout},
                      {"parameters", model_config_.num_params()},
                      {"steps", config_.steps},
                      {"micro_batch", config_.micro_batch},
                      {"global_batch", config_.global_batch},
                      {"micro_batches", config_.global_batch / (config_.micro_batch * l.dp)},
                      {"optimizer", optimizer_->name()},
                      {"world", world},
                      {"threads", omp_get_max_threads()},
                      {"save", !config_.save.empty()},
                      {"trace", config_.trace}};
  if (!config_.predicted_memory.is_null()) j["predicted_memory"] = config_.predicted_memory;
  // The schedule and optimizer in effect (a resume takes the run's: train/resume_settings.hpp), and
  // what the resume took from its checkpoint where the flags' defaults would differ.
  j["train_settings"] = training_settings_json(config_);
  if (!config_.resumed_settings.empty()) j["resumed_settings"] = config_.resumed_settings;
  if (!config_.init_shape.empty()) j["init_shape"] = config_.init_shape;
  return j;
}

analysis::StepPasses Trainer::last_step_passes() {
  using parallel::pipeline::Pass;
  if (!stepped_) return {};  // this process trained no step (--steps 0, a resume at --steps): nothing sent
  const int64_t n_mb = config_.global_batch / (config_.micro_batch * layout_.dp);
  if (!pipeline_) return analysis::StepPasses::whole(n_mb);
  // Each of the rank's chunks runs its share of the list's passes (Executor: one list for all chunks).
  const auto& actions = pipeline_->actions(last_phase_);
  const auto count = [&](auto of_kind) { return int64_t(std::count_if(actions.begin(), actions.end(), of_kind)); };
  const int64_t m = layout_.virtual_stages;
  return {count([](const auto& a) { return a.pass == Pass::forward; }) / m,
          count([](const auto& a) { return parallel::pipeline::is_backward(a.pass); }) / m, last_step_updates_};
}

void Trainer::summarize(const RunTotals& t) {
  // Summary: the memory the tracking allocator measured on every rank, the formula beside it.
  analysis::ActivationShape shape{model_config_.seq_len, config_.micro_batch, model_config_.hidden,
                                  model_config_.heads, model_config_.padded_vocab(layout_.tp), layout_.tp,
                                  layout_.sequence_parallel, bytes_of(layout_.activation_dtype),
                                  model_config_.dropout > 0, layout_.fused_attention(), layout_.pack_masks,
                                  layout_.fp8_kept, layout_.cp};
  // This rank's formula per layer: an MoE layer's with the assignments and received rows its last
  // forward kept (read back from the dispatch indices and the experts' inputs), which the data decide.
  std::vector<int64_t> formula, moe_assignments, moe_received;
  const MoEConfig& moe = model_config_.moe;
  const std::vector<LayerRecompute> recompute = layer_recompute(layout_, model_config_.layers);
  for (int l : local_layers()) {
    const LayerRecompute mode = recompute[size_t(l)];
    const bool full = forward_recomputed(mode), selective = mode == LayerRecompute::selective;
    if (mode == LayerRecompute::in_segment) {  // keeps nothing (docs/design.md §3)
      formula.push_back(0), moe_assignments.push_back(0), moe_received.push_back(0);
      continue;
    }
    if (!moe.is_moe_layer(l)) {
      formula.push_back(analysis::layer_activation_bytes(shape, full, selective));
      moe_assignments.push_back(0), moe_received.push_back(0);
      continue;
    }
    const auto& ops = kept_->layer_ops()[size_t(l)];
    auto bytes = [&](const char* op) { const auto it = ops.find(op); return it == ops.end() ? int64_t(0) : it->second; };
    // dispatch_indices holds (2A + 2E) int32; expert_fc1_input R rows of h.
    const int64_t assignments = bytes("dispatch_indices") > 0 ? bytes("dispatch_indices") / 8 - moe.experts : 0;
    const int64_t received = bytes("expert_fc1_input") / (int64_t(model_config_.hidden) * shape.d);
    const analysis::MoEKeptShape m = analysis::moe_kept_shape(shape, model_config_, assignments, received);
    formula.push_back(analysis::moe_layer_activation_bytes(shape, m, full, selective));
    moe_assignments.push_back(m.assignments), moe_received.push_back(m.received);
  }
  // Stage 3 gathers each bucket twice a micro-batch, except: the position embedding once (its
  // backward needs no weights), the tied embedding once for the embedding and twice for the head.
  const ParamTable& table = model_->table();
  const bool embedding = table.wpe() >= 0, head = table.lnf_w() >= 0;
  int64_t extra_gathered = 0;
  if (table.wte() >= 0) extra_gathered += table.params()[0].numel * ((embedding ? 1 : 0) + (head ? 2 : 0) - 2);
  if (embedding) extra_gathered -= table.params()[1].numel;
  // A segment's layers below its top are gathered a third time for its re-run (docs/design.md §3).
  for (int l : local_layers())
    if (recompute[size_t(l)] == LayerRecompute::in_segment) extra_gathered += model_->buckets()[size_t(l)].size();
  // Stages 2-3 reduce the tied embedding's head part and embedding part apart (one stage, both).
  const int64_t extra_reduced = embedding && head ? table.params()[0].numel : 0;
  // Each rank's traffic by the formulas for what it ran in the last step: its stage's layers and
  // ends, its passes (a drained PipeDream-2BW step runs more backwards than forwards, and two updates).
  const analysis::StepPasses passes = last_step_passes();
  const std::vector<int> layers_here = local_layers();
  const analysis::StageTraffic stage{
      .layers = int(layers_here.size()),
      .reruns = int(std::count_if(layers_here.begin(), layers_here.end(),
                                  [&](int l) { return forward_recomputed(recompute[size_t(l)]); })),
      .embedding = embedding,
      .head = head,
      .sequence_parallel = layout_.sequence_parallel};
  // Gradients are reduced (and ZeRO shards) over DP × CP (docs/design.md §5.1); the experts' over
  // their expert-DP group, N_d·c/e ranks (§9).
  int64_t expert_psi = 0;
  for (const ParamInfo& p : model_->table().params()) expert_psi += p.expert ? p.numel : 0;
  const double dp_formula = analysis::dp_bytes(model_->num_params() - expert_psi, layout_.dp * layout_.cp,
                                               states_->zero_stage(), passes, extra_gathered, extra_reduced);
  const double expert_dp_formula =
      analysis::dp_bytes(expert_psi, layout_.dp * layout_.cp / layout_.ep, states_->zero_stage(), passes);
  // The conjugate operators of a TP group carry its CP rank's s/c positions (docs/design.md §5.1).
  const int64_t tp_positions = model_config_.seq_len / layout_.cp;
  const double tp_formula = analysis::tp_conjugate_bytes(tp_positions, config_.micro_batch, model_config_.hidden,
                                                         layout_.tp, stage, passes);
  // Ulysses' all-to-alls or the ring's transfers (docs/design.md §5.1); under CP each MoE layer's
  // forward (and its re-run) also all-gathers the router logits.
  int64_t moe_layers = 0, moe_reruns = 0;
  for (int l : layers_here)
    if (moe.is_moe_layer(l)) ++moe_layers, moe_reruns += forward_recomputed(recompute[size_t(l)]) ? 1 : 0;
  const double cp_formula =
      analysis::cp_bytes(layout_.cp_comm, model_config_.seq_len, config_.micro_batch, model_config_.hidden, layout_.tp,
                         layout_.cp, layout_.fused_attention(), stage, passes) +
      (moe.enabled() ? double(passes.forwards * moe_layers + passes.backwards * moe_reruns) *
                           analysis::moe_cp_gather_bytes(moe, int64_t(config_.micro_batch) * model_config_.seq_len,
                                                         layout_.cp)
                     : 0.0);
  // The all-to-alls if every expert got its share: per MoE layer and micro-batch, dispatch and
  // combine of the routed rows in forward and the same in backward, and the forward's exchange of E
  // counts; a re-run forward routes again.
  double ep_formula = 0;
  if (moe.enabled() && layout_.ep > 1) {
    // A CP rank routes its s/c positions' share of the micro-batch's assignments.
    const int64_t A = analysis::cp_rank_assignments(moe, int64_t(config_.micro_batch) * model_config_.seq_len, layout_.cp);
    const double rows = analysis::kMoEAllToAllsForward * analysis::moe_all_to_all_bytes(A, model_config_.hidden, layout_.ep);
    const double counts = double(layout_.ep - 1) / layout_.ep * moe.experts * 4;
    ep_formula = double(moe_layers) * (double(passes.forwards) * (rows + counts) + double(passes.backwards) * rows) +
                 double(passes.backwards * moe_reruns) * (rows + counts);
  }

  const auto& ms = MemoryTracker::model_states();
  const parallel::RankCoords coords = dist_ ? dist_->coords() : parallel::RankCoords{};
  std::vector<int64_t> mine = {dist_ ? dist_->rank() : 0, coords.tp_rank, coords.pp_rank, coords.dp_rank,
                               activation_peak_, kept_->outside(),
                               ms.live_bytes_of_op("params"), ms.live_bytes_of_op("grads"),
                               ms.live_bytes_of_op("optimizer"), ms.live_bytes_of_op("bf16_weights")};
  for (int kind : {int(comm::GroupKind::tp), int(comm::GroupKind::dp), int(comm::GroupKind::pp)})
    mine.push_back(step_sent_bytes_[size_t(kind)]);
  mine.push_back(int64_t(parallel::conjugate_traffic().conjugate()));
  mine.push_back(int64_t(parallel::conjugate_traffic().regather));
  mine.push_back(states_->transient_peak_bytes());
  mine.push_back(model_->num_params());  // this rank's Ψ (its TP shard of its stage)
  mine.push_back(std::llround(dp_formula));
  mine.push_back(optimizer_->state_bytes());
  mine.push_back(MemoryTracker::model_states().peak_bytes());  // since start: setup included
  mine.push_back(int64_t(states_->wait_seconds() * 1e6));  // µs, the last step
  mine.push_back(expert_psi);  // [21]
  mine.push_back(step_sent_bytes_[size_t(comm::GroupKind::ep)]);         // [22]
  mine.push_back(step_sent_bytes_[size_t(comm::GroupKind::expert_dp)]);  // [23]
  mine.push_back(step_sent_bytes_[size_t(comm::GroupKind::cp)]);         // [24]
  mine.push_back(std::llround(expert_dp_formula));                       // [25]
  mine.push_back(std::llround(tp_formula));                              // [26]
  mine.push_back(std::llround(cp_formula));                              // [27]
  mine.push_back(std::llround(ep_formula));                              // [28]
  constexpr size_t kCategoriesAt = 29;  // [29, 29 + categories): each category's peak; then the totals
  for (int c = 0; c < kMemoryCategories; ++c) mine.push_back(MemoryTracker::of(MemoryCategory(c)).run_peak_bytes());
  mine.push_back(MemoryTracker::accounted_peak_bytes());
  mine.push_back(MemoryTracker::reserved_peak_bytes());
  mine.push_back(resident_bytes().peak);
  mine.push_back(MemoryTracker::ram_reserved_peak_bytes());
  for (int64_t bytes : MemoryTracker::accounted_peak_by_category()) mine.push_back(bytes);  // at the accounted peak
  // The last step's traffic by group and operator: calls and bytes sent (ring accounting).
  const size_t ops_at = mine.size();
  for (int g = 0; g < comm::kGroupKinds; ++g)
    for (int op = 0; op < comm::kCollectiveOps; ++op) {
      const comm::TrafficEntry& e = step_traffic_.entry(comm::GroupKind(g), comm::CollectiveOp(op));
      mine.push_back(e.calls), mine.push_back(int64_t(e.sent_bytes)), mine.push_back(e.payload_bytes);
    }
  const size_t layers_at = mine.size();  // then four per-layer runs of this rank's layers (stages may differ)
  for (int l : local_layers()) mine.push_back(kept_->per_layer()[size_t(l)]);
  for (auto* v : {&formula, &moe_assignments, &moe_received}) mine.insert(mine.end(), v->begin(), v->end());
  const auto rows = gather_rows(dist_, mine);
  if (!is_logging_rank()) return;

  const bool adam = std::string(optimizer_->name()) == "adamw";
  std::vector<MemoryReport> reports;
  nlohmann::json comm_ranks = nlohmann::json::array();
  for (const auto& row : rows) {
    MemoryReport m;
    m.rank = int(row[0]), m.tp_rank = int(row[1]), m.pp_rank = int(row[2]), m.dp_rank = int(row[3]);
    m.activation_peak_bytes = row[4], m.activation_bytes_outside_layers = row[5];
    m.params = row[6], m.grads = row[7], m.optimizer = row[8], m.compute_weights = row[9];
    m.transient_peak_bytes = row[15];
    // Dense states over the DP group, experts' over the expert-DP group (ZeRO shards each over its own).
    const analysis::ModelStateBytes states_formula = analysis::moe_model_state_bytes(
        {row[16] - row[21], row[21]}, layout_.dp * layout_.cp, layout_.ep, states_->zero_stage(), layout_.mixed_precision(),
        adam && config_.optim.offload_dir.empty() ? 8 : 0,  // offloaded moments: on disk, not resident
        states_->versions());
    m.params_formula = config_.optim.offload_params ? 0 : states_formula.params;  // on disk when offloaded
    m.grads_formula = states_formula.grads;
    // Adafactor and SM3: their own count of the states they keep (tensor shapes, not a per-Ψ rule).
    m.optimizer_formula = states_formula.optimizer + (adam ? 0 : row[18]);  // (+ masters when 16-bit)
    m.model_state_peak_bytes = row[19];
    for (int c = 0; c < kMemoryCategories; ++c)
      m.category_peak_bytes.emplace_back(category_name(MemoryCategory(c)), row[kCategoriesAt + size_t(c)]);
    m.accounted_peak_bytes = row[kCategoriesAt + kMemoryCategories];
    m.reserved_peak_bytes = row[kCategoriesAt + kMemoryCategories + 1];
    m.rss_peak_bytes = row[kCategoriesAt + kMemoryCategories + 2];
    m.ram_reserved_peak_bytes = row[kCategoriesAt + kMemoryCategories + 3];
    for (int c = 0; c < kMemoryCategories; ++c)
      m.accounted_peak_by_category.emplace_back(category_name(MemoryCategory(c)),
                                                row[kCategoriesAt + kMemoryCategories + 4 + size_t(c)]);
    const size_t n_layers = (row.size() - layers_at) / 4;
    auto part = [&](size_t k) { return std::vector<int64_t>(row.begin() + long(layers_at + k * n_layers),
                                                            row.begin() + long(layers_at + (k + 1) * n_layers)); };
    m.activation_bytes_per_layer = part(0), m.activation_bytes_per_layer_formula = part(1);
    if (moe.enabled()) m.moe_assignments = part(2), m.moe_received = part(3);
    // The first stage keeps the embedding's dropout mask, the last the head's tensors (the idioms of
    // analysis/memory_categories.cpp: p = 2 gives the mask alone, in_flight = 0 the head alone).
    m.activation_bytes_outside_formula = (m.pp_rank == 0 ? analysis::extra_activation_bytes(shape, 2, 1) : 0) +
                                         (m.pp_rank == layout_.pp - 1 ? analysis::extra_activation_bytes(shape, 1, 0) : 0);
    if (m.rank == 0) m.activation_bytes_by_op = kept_->by_op();
    nlohmann::json by_op = nlohmann::json::object();
    for (int g = 0; g < comm::kGroupKinds; ++g)
      for (int op = 0; op < comm::kCollectiveOps; ++op) {
        const size_t at = ops_at + 3 * size_t(g * comm::kCollectiveOps + op);
        if (row[at] == 0) continue;
        by_op[comm::to_string(comm::GroupKind(g))][comm::to_string(comm::CollectiveOp(op))] = {
            {"calls", row[at]}, {"sent_bytes", row[at + 1]}, {"payload_bytes", row[at + 2]}};
      }
    comm_ranks.push_back({{"rank", m.rank}, {"tp", row[10]}, {"dp", row[11]}, {"pp", row[12]}, {"by_op", by_op},
                          {"tp_conjugate", row[13]}, {"tp_regather", row[14]},
                          {"tp_conjugate_formula", row[26]}, {"dp_formula", row[17]},
                          {"dp_wait_s", double(row[20]) * 1e-6}});
    if (layout_.cp > 1) comm_ranks.back()["cp"] = row[24], comm_ranks.back()["cp_formula"] = row[27],
                          comm_ranks.back()["cp_comm"] = to_string(layout_.cp_comm);
    if (moe.enabled()) {
      comm_ranks.back()["ep"] = row[22], comm_ranks.back()["expert_dp"] = row[23];
      comm_ranks.back()["ep_formula_balanced"] = row[28], comm_ranks.back()["expert_dp_formula"] = row[25];
    }
    reports.push_back(std::move(m));
  }

  const double tokens_per_s = t.timed_steps ? double(t.tokens) * double(t.timed_steps) / t.total_s : 0.0;
  // Model FLOPs over the capacity of every rank together (Σ ranks' peaks): docs/mfu.md.
  const double mfu =
      t.timed_steps && t.peak.total > 0 ? t.step_flops * double(t.timed_steps) / t.total_s / t.peak.total : 0.0;
  // One layer's conjugates in all of the logging rank's passes of the last step (a re-run's not counted).
  const double tp_layer_formula = analysis::tp_conjugate_bytes(
      model_config_.seq_len / layout_.cp, config_.micro_batch, model_config_.hidden, layout_.tp,
      {.layers = 1, .sequence_parallel = layout_.sequence_parallel}, passes);
  std::vector<double> rank0_layer_bytes;
  // Measured by layer through the model's layer regions (core/region.hpp).
  auto tp_bytes_of = [](int l) {
    const auto& by_layer = parallel::conjugate_traffic().by_layer;
    const auto it = by_layer.find(l);
    return it == by_layer.end() ? 0.0 : it->second;
  };
  for (int l : local_layers()) rank0_layer_bytes.push_back(tp_bytes_of(l));
  if (run_log_) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& m : reports) ranks.push_back(memory_json(m));
    // Table 2's three terms of rank 0's first layer, beside its kept bytes by op (a dense layer
    // keeping its activations; selective recompute keeps no attention term).
    if (!moe.is_moe_layer(0) && !analysis::layer_fully_recomputed(layout_, 0, model_config_.layers)) {
      const analysis::LayerBytes parts = analysis::layer_activation_parts(shape);
      const bool selective = layout_.recompute == Recompute::selective;
      ranks[0]["activation_bytes_by_op_first_layer"] = kept_->layer_ops()[size_t(local_layers().front())];
      ranks[0]["activation_parts_formula"] = {{"replicated", parts.replicated},
                                              {"tp_divided", parts.tp_divided},
                                              {"attention", selective ? 0 : parts.attention}};
    }
    nlohmann::json summary = {{"event", "summary"},
                              {"steps", step_},

                              {"tokens_per_s", tokens_per_s},
                              {"parameters", model_config_.num_params()},
                              {"memory", {{"ranks", ranks}}},
                              {"comm", {{"ranks", comm_ranks}, {"rank0_tp_bytes_per_layer", rank0_layer_bytes},
                                        {"tp_bytes_per_layer_formula", tp_layer_formula}}}};
    summary["step_time"] = timing_->times().summary_json();  // by rank: compute, wait, bubble
    add_mfu_json(summary, mfu, t.peak.rank.flops, t.peak.total,
                 t.peak.total > 0 ? t.peak.rank.source : t.peak.long_text());
    // A run that trained no step (--steps 0, or --steps at a resumed checkpoint's step) has no loss.
    if (std::isfinite(t.first_loss)) summary["first_loss"] = t.first_loss, summary["final_loss"] = t.last_loss;
    if (model_config_.moe.enabled()) {
      nlohmann::json layers = nlohmann::json::array();
      int i = 0;
      for (int l = 0; l < model_config_.layers; ++l)
        if (model_config_.moe.is_moe_layer(l) && size_t(i) < moe_load_.size())
          layers.push_back({{"layer", l}, {"tokens_per_expert", moe_load_[size_t(i++)]}});
      summary["moe_load"] = layers;
    }
    if (const nlohmann::json device = device_memory_json(); !device.is_null()) summary["device_memory"] = device;
    if (const nlohmann::json ops = op_profile_json(); !ops.is_null()) summary["op_profile"] = ops;
    run_log_->record(summary);
  }
  if (!config_.json) {
    if (std::isfinite(t.first_loss))
      std::fprintf(stderr, "done: %lld steps, loss %.4f -> %.4f, %.0f tokens/s, %s\n", (long long)step_,
                   t.first_loss, t.last_loss, tokens_per_s,
                   t.peak.total > 0 ? ("MFU " + fmt_percent(mfu) + " of " + t.peak.long_text()).c_str()
                                    : t.peak.long_text().c_str());
    else
      std::fprintf(stderr, "done: no step trained (the run is at step %lld of --steps %lld)\n", (long long)step_,
                   (long long)config_.steps);
    print_memory_table(reports[0]);
    print_device_memory(device_memory_json());
    print_op_profile(op_profile_json(), t.total_s);
    timing_->times().print(stderr);
    int i = 0;
    for (int l = 0; l < model_config_.layers; ++l) {
      if (!model_config_.moe.is_moe_layer(l) || size_t(i) >= moe_load_.size()) continue;
      std::fprintf(stderr, "  layer %d tokens per expert:", l);
      for (int64_t n : moe_load_[size_t(i++)]) std::fprintf(stderr, " %lld", (long long)n);
      std::fprintf(stderr, "\n");
    }
    if (config_.comm_report) {
      print_comm_report(comm_ranks);
      std::fprintf(stderr, "  rank 0, tp bytes per layer (forward + backward, all micro-batches):");
      for (int l : local_layers())
        std::fprintf(stderr, " L%d %s", l, human_bytes(tp_bytes_of(l)).c_str());
      std::fprintf(stderr,
                   "\n  per layer by the formula (conjugate operators; SP adds its re-gathers): 2·2(t-1)/t·b(s/c)h·4 "
                   "a forward, as much a backward, over rank 0's passes of the step = %s\n",
                   human_bytes(tp_layer_formula).c_str());
    }
  }
}

}  // namespace lattice
