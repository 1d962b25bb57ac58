#include "plan/memory_model.hpp"

#include "core/stage_partition.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/bf16_fused.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/gemm.hpp"
#include "plan/gemm_shapes.hpp"

namespace lattice::plan {

namespace {
// oneDNN's answer for one shape, remembered: --search asks it of the same shapes for many layouts.
std::vector<int64_t> remembered_scratchpad(const GemmShape& s, bool bf16, int threads, bool out16) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, float, bool, bool, int, bool>;
  static std::map<Key, std::vector<int64_t>> known;
  static std::mutex guard;
  const Key key{s.batch, s.M, s.N, s.K, s.trans_a, s.trans_b, s.alpha, s.accumulate, bf16, threads, out16};
  std::lock_guard<std::mutex> lock(guard);
  auto it = known.find(key);
  if (it == known.end()) it = known.emplace(key, gemm_scratchpad_bytes(s, bf16, threads, out16)).first;
  return it->second;
}

// Each thread's largest GEMM scratchpad over `calls`, summed over the threads, and the calling
// thread's largest widened copies (kernels/gemm.hpp gemm_widened_bytes: bf16 GEMMs widened to fp32).
// With fused attention the engine makes none of the s² GEMMs: they are left out. `experts`: an MoE
// block's expert GEMMs, counted for their widened copies, which grow with their rows (an expert can
// receive more than the dense MLP's; oneDNN's scratchpads barely do, and the MLP's stand in there).
int64_t scratchpad_bytes(const std::vector<GemmCall>& calls, bool bf16, int threads, bool fused_attention,
                         const std::vector<GemmCall>& experts = {}) {
  std::vector<int64_t> largest(size_t(std::max(1, threads)), 0);
  int64_t widened = 0;
  for (const GemmCall& call : experts)
    widened = std::max(widened, gemm_widened_bytes(call.shape, bf16, threads, bf16 && call.out16));
  for (const GemmCall& call : calls) {
    if (fused_attention && call.attention) continue;
    widened = std::max(widened, gemm_widened_bytes(call.shape, bf16, threads, bf16 && call.out16));
    // A bf16 destination's fp32 accumulation is the library's scratch (at two threads each part's C in
    // fp32: 16 MiB a thread for GPT-2-small's head at micro-batch 4, vocabulary 8192).
    const std::vector<int64_t> bytes = remembered_scratchpad(call.shape, bf16, threads, bf16 && call.out16);
    for (size_t t = 0; t < largest.size() && t < bytes.size(); ++t) largest[t] = std::max(largest[t], bytes[t]);
  }
  int64_t sum = widened;
  for (int64_t b : largest) sum += b;
  return sum;
}
}  // namespace

analysis::MemoryCase memory_case(const PlanRequest& r) {
  analysis::MemoryCase c{activation_shape(r), r.model, r.layout, r.micro_batches(), r.data_bytes, r.save};
  c.offload_optimizer = r.offload_optimizer, c.offload_params = r.offload_params;
  c.zero_bubble = r.zero_bubble, c.threads = r.threads;
  c.weight_versions = r.weight_versions();
  c.gpipe = r.gpipe;
  if (r.engine_scratch) {  // (an MoE layer's experts: its dense MLP's shapes stand in for theirs)
    std::vector<GemmCall> calls = layer_gemms(c.x);
    const std::vector<GemmCall> experts =
        r.model.moe.enabled()
            ? moe_block_gemms(moe_loaded_shape(r), int(r.model.moe.experts / std::max(1, r.layout.ep)))
            : std::vector<GemmCall>{};
    c.gemm_scratchpad = scratchpad_bytes(calls, r.bf16_compute(), r.threads, c.x.fused_attention, experts);
    const std::vector<GemmCall> head = head_gemms(c.x);
    calls.insert(calls.end(), head.begin(), head.end());
    c.gemm_scratchpad_last = scratchpad_bytes(calls, r.bf16_compute(), r.threads, c.x.fused_attention, experts);
  }
  if (r.engine_scratch && c.x.d == 2)
    c.head_scratch = ce_widened_block_bytes(c.x.b * c.x.positions(), c.x.v / c.x.t, r.threads);
  if (r.engine_scratch && c.x.fused_attention) {
    // The engine's calls (model/attention.cpp, tensor_parallel/): the whole causal square of a/t heads;
    // under Ulysses a/(t·c) heads of it; the ring's blocks, a/t heads of one chunk of S/(2c) rows.
    const analysis::ActivationShape& x = c.x;
    const int64_t heads = x.a / x.t, dh = x.h / x.a;
    FlashBlock blk = whole_sequence(FlashShape{x.b, heads, x.s, dh});
    if (x.cp > 1 && r.layout.cp_comm == CpComm::a2a) blk = whole_sequence(FlashShape{x.b, heads / x.cp, x.s, dh});
    if (x.cp > 1 && r.layout.cp_comm == CpComm::p2p) blk.nq = blk.nk = x.s / (2 * x.cp);
    c.attention_scratch = std::max(flash_block_forward_scratch_bytes(blk, r.threads),
                                   flash_block_backward_scratch_bytes(blk, r.threads));
  }
  if (r.model.moe.enabled()) {
    const analysis::MoEKeptShape loaded = moe_loaded_shape(r);
    c.moe_layer_kept = analysis::moe_layer_activation_bytes(c.x, loaded, false, false);
    c.moe_workspace = analysis::moe_workspace_bytes(loaded);
  }
  return c;
}

MemoryPlan plan_memory(const PlanRequest& r) {
  const analysis::ActivationShape x = activation_shape(r);
  analysis::require_countable_activations(x);
  const LayoutConfig& l = r.layout;
  const bool first_full = analysis::layer_fully_recomputed(l, 0, r.model.layers);
  const bool selective = l.recompute == Recompute::selective;
  MemoryPlan m;
  const StagePartition partition = StagePartition::of(l, r.model.layers);
  const int64_t moment_bytes = r.offload_optimizer || r.offload_params ? 0 : 8;  // offloaded moments live on disk
  const int versions = r.weight_versions();
  m.activation_bytes_per_layer = analysis::layer_activation_bytes(x, first_full, selective);
  if (r.model.moe.enabled()) {
    // MoE layers keep the attention half of Table 2's row plus the MoE block, sized for balanced
    // experts (docs/design.md §12); the dense parameters' states shard over N_d, the experts' over N_d/e.
    const analysis::MoEKeptShape moe = moe_kept_shape(r);
    m.moe_layer_activation_bytes = analysis::moe_layer_activation_bytes(x, moe, first_full, selective);
    const analysis::MoEKeptShape loaded = moe_loaded_shape(r);
    m.moe_received_rows_max = loaded.received;
    m.moe_layer_activation_bytes_max = analysis::moe_layer_activation_bytes(x, loaded, first_full, selective);
    m.first_stage_moe_layers = analysis::first_stage_moe_layers(r.model, l);
    m.first_stage_layer_bytes = analysis::moe_first_stage_layer_bytes(x, moe, l, r.model);
    const analysis::MoEShardParameters psi = analysis::moe_shard_parameters(r.model, l);
    m.dense_parameters = psi.dense;
    m.expert_parameters = psi.experts;
    m.shard_parameters = psi.total();
    m.model_state = analysis::moe_model_state_bytes(psi, l.dp_cp(), l.ep, l.zero, r.mixed_precision(), moment_bytes, versions);
  } else {
    m.first_stage_layer_bytes = analysis::first_stage_layer_bytes(x, l, r.model.layers);
    m.shard_parameters = m.dense_parameters =
        analysis::stage_parameters(r.model, l.tp, l.pp, 0, int(partition.layers_of_rank(0, l.pp).size()));
    // CP ranks hold the same weights: ZeRO shards over the N_d·c ranks of DP with CP, as the trainer does.
    m.model_state =
        analysis::model_state_bytes(m.shard_parameters, l.dp_cp(), l.zero, r.mixed_precision(), moment_bytes, versions);
  }
  if (r.offload_params) m.model_state.params = 0;  // the shard lives on disk (--offload-params)
  // p micro-batches are in flight on the first stage under 1F1B (eq. 5 note).
  m.extra_activation_bytes = analysis::extra_activation_bytes(x, l.pp, l.pp);
  m.first_stage_activation_bytes = m.first_stage_layer_bytes + double(m.extra_activation_bytes);
  m.total_bytes = double(m.model_state.total()) + m.first_stage_activation_bytes;
  // Uneven stages (--pipeline-layers): the heaviest stage need not be the first; the figures above
  // then describe the heaviest (its layers, micro-batches in flight, parameters and outside tensors).
  for (int stage = 1; !r.model.moe.enabled() && !l.stage_layers.empty() && !r.zero_bubble && stage < l.pp; ++stage) {
    const int64_t psi = analysis::stage_parameters(r.model, l.tp, l.pp, stage,
                                                   int(partition.layers_of_rank(stage, l.pp).size()));
    const analysis::ModelStateBytes states =
        analysis::model_state_bytes(psi, l.dp_cp(), l.zero, r.mixed_precision(), moment_bytes, versions);
    const double layers = analysis::stage_layer_bytes(x, l, r.model.layers, stage);
    const int64_t extra = stage == l.pp - 1 ? analysis::extra_activation_bytes(x, 1, 0) : 0;
    const double total = double(states.total() - (r.offload_params ? states.params : 0)) + layers + double(extra);
    if (total <= m.total_bytes) continue;
    m.stage = stage;
    m.first_stage_layer_bytes = layers;
    m.extra_activation_bytes = extra;
    m.first_stage_activation_bytes = layers + double(extra);
    m.shard_parameters = m.dense_parameters = psi;
    m.model_state = states;
    if (r.offload_params) m.model_state.params = 0;
    m.total_bytes = total;
  }
  m.capacity_bytes = r.gpu_memory;
  // MoE ranks are predicted for one stage without recompute, ZeRO 0–1 and fp32 weights: backward's
  // transient model states are modelled for dense buckets only (MoE with ZeRO-3 measured 19% above).
  const bool moe_predicted = l.pp == 1 && l.recompute == Recompute::none && l.recompute_plan.empty() && l.zero < 2 &&
                             !l.mixed_precision();
  if (!r.model.moe.enabled() || moe_predicted) {
    analysis::MemoryCase c = memory_case(r);
    for (int stage = 0; stage < l.pp; ++stage) {
      c.writer = r.save && stage == 0;  // world rank 0 is on the first stage
      m.by_stage.push_back(analysis::rank_memory(c, stage));
    }
    m.accounted_capacity = r.accounted_budget;
    // ZB-H1: later stages hold weight-pass operands too, so the heaviest stage decides what fits
    // (its activations and steady model states, as total_bytes counts them).
    if (r.zero_bubble)
      for (int stage = 0; stage < l.pp; ++stage) {
        const analysis::CategoryBytes& b = m.by_stage[size_t(stage)];
        const double total = double(b.activations + b.model_states_steady);
        if (total <= m.total_bytes) continue;
        m.stage = stage;
        m.total_bytes = total;
      }
  }
  return m;
}

bool MemoryPlan::fits() const {
  if (!accounted_capacity || by_stage.empty()) return total_bytes <= double(capacity_bytes);
  for (const analysis::CategoryBytes& b : by_stage)
    if (b.accounted_peak > capacity_bytes) return false;
  return true;
}

}  // namespace lattice::plan
