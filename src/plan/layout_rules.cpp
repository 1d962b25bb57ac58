// The constraints a layout must meet before anything is computed (issue 6, "Bad input").
#include <string>

#include "core/error.hpp"
#include "core/recompute_plan.hpp"
#include "core/stage_partition.hpp"
#include "plan/plan_request.hpp"

namespace lattice::plan {

namespace {
std::string n(int64_t v) { return std::to_string(v); }
}  // namespace

analysis::ActivationShape activation_shape(const PlanRequest& r) {
  analysis::ActivationShape x;
  x.s = r.model.seq_len;
  x.b = r.micro_batch;
  x.h = r.model.hidden;
  x.a = r.model.heads;
  x.v = r.model.padded_vocab(r.layout.tp);
  x.t = r.layout.tp;
  x.sp = r.layout.sequence_parallel;
  x.d = bytes_of(r.layout.activation_dtype);
  x.dropout = r.model.dropout > 0;
  x.fused_attention = r.layout.fused_attention();
  x.packed_masks = r.layout.pack_masks;
  x.fp8_kept = r.layout.fp8_kept;
  x.cp = r.layout.cp;
  return x;
}

analysis::FlopsShape flops_shape(const PlanRequest& r) {
  return {double(r.global_batch), double(r.model.seq_len), double(r.model.layers),
          double(r.model.hidden), double(r.model.padded_vocab(r.layout.tp))};
}

analysis::MoEKeptShape moe_kept_shape(const PlanRequest& r) {
  const analysis::ActivationShape x = activation_shape(r);
  // Balanced experts: each rank's experts receive as many rows as its own router sends out; under CP
  // a rank sends its s/c positions' share.
  const int64_t a = r.model.moe.enabled() ? analysis::cp_rank_assignments(r.model.moe, x.s * x.b, x.cp) : 0;
  return analysis::moe_kept_shape(x, r.model, a, a);
}

analysis::MoEKeptShape moe_loaded_shape(const PlanRequest& r) {
  analysis::MoEKeptShape m = moe_kept_shape(r);
  m.received = analysis::moe_received_rows_bound(r.model.moe, m.s * m.b, r.layout.ep, m.cp);
  return m;
}

namespace {
// Expert parallelism and the MoE shape (issue 13): empty when they can run.
std::string moe_layout_problem(const PlanRequest& r) {
  const LayoutConfig& l = r.layout;
  const MoEConfig& moe = r.model.moe;
  if (l.ep < 1) return "--expert-model-parallel-size must be at least 1 (got " + n(l.ep) + ")";
  if (!moe.enabled()) {
    if (l.ep > 1) return "--expert-model-parallel-size " + n(l.ep) + " needs an MoE model (--num-experts)";
    return "";
  }
  if (moe.experts % l.ep != 0)
    return "--num-experts (" + n(moe.experts) + ") must be divisible by the expert-parallel size (" + n(l.ep) + ")";
  if ((l.dp * l.cp) % l.ep != 0)
    return l.cp > 1 ? "the expert-parallel size (" + n(l.ep) + ") must divide N_d·c = gpus/(t·p) = " + n(l.dp * l.cp) +
                          ": expert-parallel groups are cut from the data- and context-parallel ranks"
                    : "the expert-parallel size (" + n(l.ep) + ") must divide the data-parallel size N_d = gpus/(t·p) = " +
                          n(l.dp) + ": expert-parallel groups are cut from the data-parallel ranks";
  if (r.model.ffn_hidden() % l.tp != 0)
    return "the experts' hidden size (" + n(r.model.ffn_hidden()) + ") must be divisible by the tensor-parallel size (" +
           n(l.tp) + ")";
  const int64_t tokens = int64_t(r.model.seq_len) * r.micro_batch;
  if (tokens % moe.groups != 0)
    return "--moe-groups (" + n(moe.groups) + ") must divide the tokens of a micro-batch, s·b = " + n(tokens);
  return "";
}
}  // namespace

std::string layout_problem(const PlanRequest& r) {
  const LayoutConfig& l = r.layout;
  const int t = l.tp, p = l.pp, m = l.virtual_stages;
  if (t < 1 || p < 1 || m < 1 || l.dp < 1 || l.cp < 1)
    return "parallel sizes must be at least 1 (t=" + n(t) + ", p=" + n(p) + ", m=" + n(m) + ")";
  if (l.cp > 1 && int64_t(t) * l.cp * p * l.dp != r.gpus)
    return "t·c·p·DP must equal --gpus: " + n(t) + "·" + n(l.cp) + "·" + n(p) + "·" + n(l.dp) + " != " + n(r.gpus);
  if (int64_t(t) * l.cp * p * l.dp != r.gpus)
    return "t·p·DP must equal --gpus: " + n(t) + "·" + n(p) + "·" + n(l.dp) + " != " + n(r.gpus);
  if (r.model.heads % t != 0)
    return "--heads (" + n(r.model.heads) + ") must be divisible by the tensor-parallel size (" + n(t) + ")";
  if (l.sequence_parallel && r.model.seq_len % t != 0)  // the trainer's rule (train/validate.cpp), worded alike
    return "--sequence-parallel needs --seq-len (" + n(r.model.seq_len) + ") divisible by --tensor-model-parallel-size (" +
           n(t) + ")";
  // Context parallelism's rules are the trainer's own (core/config.hpp), worded alike.
  if (const std::string cp = context_parallel_problem(r.model, l); !cp.empty()) return cp;
  if (l.stage_layers.empty() && r.model.layers % (p * m) != 0)
    return "--layers (" + n(r.model.layers) + ") must be divisible by p·m = " + n(p) + "·" + n(m) +
           " (or give the stages' counts with --pipeline-layers)";
  if (!l.stage_layers.empty()) {
    try {
      StagePartition::of(l, r.model.layers);
    } catch (const InputError& e) {
      return e.what();
    }
  }
  if (m > 1 && p == 1) return "--virtual-stages > 1 needs --pipeline-model-parallel-size > 1";
  if (r.micro_batch < 1) return "--micro-batch must be at least 1 (got " + n(r.micro_batch) + ")";
  if (r.global_batch % (int64_t(r.micro_batch) * l.dp) != 0)
    return "--global-batch (" + n(r.global_batch) + ") must be a multiple of micro-batch·DP = " +
           n(r.micro_batch) + "·" + n(l.dp);
  if (r.micro_batches() < 1) return "--global-batch must hold at least one micro-batch per rank";
  if (m > 1 && r.micro_batches() % p != 0)
    return "the interleaved schedule needs micro-batches per step (" + n(r.micro_batches()) +
           ") to be a multiple of p (" + n(p) + ")";
  if (l.zero < 0 || l.zero > 3) return "--zero must be 0, 1, 2 or 3 (got " + n(l.zero) + ")";
  if (r.pipedream_2bw) {  // as the trainer refuses them (docs/design.md §6.3)
    if (m > 1) return "pipedream-2bw runs one chunk a rank (--virtual-stages 1)";
    if (r.micro_batches() < p)
      return "pipedream-2bw needs at least p = " + n(p) + " micro-batches per step (got " + n(r.micro_batches()) + ")";
    if (l.zero == 3 && l.dp * l.cp > 1)  // ZeRO shards over DP × CP
      return "pipedream-2bw keeps two whole weight versions: --zero 3 shards them over the data-parallel and "
             "context-parallel ranks";
    if (l.params_dtype == ParamsDType::fp16) return "pipedream-2bw does not run fp16 weights (use bf16)";
  }
  if (l.recompute_layers >= 0 && l.recompute != Recompute::full)
    return "--recompute-layers needs --recompute full";
  if (l.recompute_layers > r.model.layers)
    return "--recompute-layers (" + n(l.recompute_layers) + ") exceeds --layers (" + n(r.model.layers) + ")";
  try {
    layer_recompute(l, r.model.layers);  // uniform's k against every stage (docs/design.md §3)
  } catch (const InputError& e) {
    return e.what();
  }
  return moe_layout_problem(r);
}

void check_layout(const PlanRequest& r) {
  r.model.validate();
  const std::string problem = layout_problem(r);
  require(problem.empty(), problem);
}

}  // namespace lattice::plan
