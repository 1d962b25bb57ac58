#pragma once
// Every byte a rank holds, predicted by category (docs/design.md §4, "Every byte a rank holds"):
// the same categories the tracking allocator measures, composed from the formulas of
// analysis/formulas.hpp and the buffers' own sizes. `lattice plan` prints it, bench/memory.sh sets
// it beside the measured peaks, and the layer's workspace is sized by layer_workspace() itself.
#include <cstdint>

#include <vector>

#include "analysis/formulas.hpp"
#include "analysis/recompute_choice.hpp"
#include "core/config.hpp"

namespace lattice::analysis {

// The layer workspace's buffers (model/workspace.hpp), in elements: 14 of [N, h], two of [N, 4h],
// the widening buffer, two s² buffers, the bf16 staging and the unpacked-mask bytes.
struct LayerWorkspace {
  int64_t nh = 0, n4h = 0, widen = 0, att = 0, half = 0, mask_bytes = 0;
  int64_t bytes() const { return 4 * (14 * nh + 2 * n4h + widen + 2 * att) + 2 * half + mask_bytes; }
};
// b, s: one micro-batch's sequences and length (the whole sequence, also under SP; under context
// parallelism c the S/c positions a CP rank holds, whose attention runs a_local/c heads over S = c·s, so
// its s² buffers are c times those of s); a_local, v_local: this rank's heads and vocabulary rows;
// attention_s2 false under fused attention.
LayerWorkspace layer_workspace(int64_t b, int64_t s, int64_t h, int64_t a_local, int64_t v_local, bool attention_s2,
                               bool pack_masks, int cp = 1);

// What a prediction needs beyond one micro-batch's activation shape.
struct MemoryCase {
  ActivationShape x;       // one micro-batch on one rank (x.t, x.sp, x.d, masks, fused attention)
  ModelConfig model;
  LayoutConfig layout;
  int64_t micro_batches = 1;  // per rank per step
  int64_t data_bytes = 0;     // token files read (train and validation), 0 if unknown
  bool save = false;          // the run writes a checkpoint
  bool writer = false;        // ... and this is the rank that writes it (world rank 0)
  bool offload_optimizer = false;  // AdamW's moments on disk (--offload-optimizer)
  bool offload_params = false;     // ZeRO-3's fp32 weight shards on disk too (--offload-params)
  bool zero_bubble = false;        // ZB-H1: stage r also holds r micro-batches' weight-pass operands
  int64_t threads = 1;             // threads a rank runs (each keeps LayerNorm partial sums for W)
  int weight_versions = 1;         // PipeDream-2BW: 2 versions of the weights and gradients
  bool gpipe = false;              // GPipe: every micro-batch's forward before any backward
  // oneDNN's GEMM scratchpads on this engine's threads (each thread's largest, summed: kernels/gemm.hpp),
  // for a stage of layers and for the last stage with the output layer; 0 for other devices.
  int64_t gemm_scratchpad = 0, gemm_scratchpad_last = 0;
  // The same engine's fused attention: the tiles its largest call holds (kernels/flash_attention.hpp),
  // never at once with the losses; 0 for unfused attention and other devices.
  int64_t attention_scratch = 0;
  // ... and its cross-entropy over bf16 logits: the fp32 rows it widens at a time (kernels/bf16_fused.hpp).
  int64_t head_scratch = 0;
  // MoE (one stage, no recompute): an MoE layer's kept bytes and the MoE block's scratch, both for the
  // most loaded rank (the capacity bound on the rows its experts receive); 0 for dense models.
  int64_t moe_layer_kept = 0, moe_workspace = 0;
};

// Bytes by category, each the category's own peak, and the accounted peak: all categories at one
// instant, which is less than the sum when ZeRO's transient buckets or a checkpoint's staging peak
// at another time than the activations.
struct CategoryBytes {
  int64_t activations = 0, model_states = 0, communication = 0, pipeline = 0, workspaces = 0, data = 0,
          checkpoint_io = 0, offload_io = 0;
  int64_t offload_disk_bytes = 0;  // not memory: the two versions of the moments' file
  int64_t model_states_steady = 0, model_states_transient = 0;  // the parts of model_states
  int64_t accounted_peak = 0;
  int64_t beside_activations = 0;  // what the accounted peak holds beside the activations at their peak
  int64_t accounted() const { return accounted_peak; }
};

// One rank of pipeline stage `stage` (TP and DP ranks are alike but for the checkpoint writer),
// holding the layers the layout's partition gives it.
CategoryBytes rank_memory(const MemoryCase& c, int stage);
// The same for a stage holding the layers of `modes` (bottom first, each layer's recompute mode): what
// the pipeline partitioner (analysis/partition.hpp) asks of every candidate stage.
struct StageLayers {
  std::vector<LayerRecompute> modes;
};
CategoryBytes rank_memory(const MemoryCase& c, int stage, const StageLayers& layers);
// Stage `stage`'s layers' costs by mode, its head's tensors and in-flight factor (docs/design.md §4),
// and as `fixed` all else its accounted peak holds then: stage_activation_peak(costs, plan) is the
// rank's accounted peak under `plan` (dense models, ZB-H1's split terms aside).
StageRecomputeCosts stage_recompute_costs(const MemoryCase& c, int stage);
// This rank's modes: the layout's list (core/recompute_plan.hpp) over the stage's layers.
std::vector<LayerRecompute> stage_modes(const MemoryCase& c, int stage);

}  // namespace lattice::analysis
