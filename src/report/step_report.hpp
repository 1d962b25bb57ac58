#pragma once
// What training prints: one line per optimizer step (human on stderr, or a JSON Lines record for
// report/run_log.hpp) and the final summary with the measured memory beside the formula.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace lattice {

// A step's routing over the global batch (docs/design.md §12): the auxiliary losses as added to
// the loss, the share of assignments dropped over capacity (expert choice: of tokens no expert
// took), and the fewest and most tokens an expert of any MoE layer received.
struct MoEStepStats {
  bool active = false;
  double aux_loss = 0, dropped_fraction = 0;
  int64_t load_min = 0, load_max = 0;
};

struct StepReport {
  int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, step_s = 0, tokens_per_s = 0, mfu = 0;
  // The step whose gradient the last update of this step applied (lr and grad_norm are its): the step
  // itself, but under a pipelined PipeDream-2BW the one before (its update lands a step late), and 0
  // where none was applied (the first step, and the first after a drain at an eval or save step).
  int64_t update_of_step = 0;
  double bits_per_byte = 0;  // the loss per byte of text (tokenizers compare; 0: unknown): docs/design.md §15
  double elapsed_s = 0, eta_s = 0;  // since the run started; the rest at this run's mean step time
  int64_t activation_peak_bytes = 0;
  double loss_scale = 0;  // fp16 training: the step's loss scale (0 = none)
  bool skipped = false;   // fp16: overflow, the update was skipped
  MoEStepStats moe;       // Mixture-of-Experts models only
  // The MFU's denominator (core/machine_peak.hpp, docs/mfu.md): a rank's peak, the sum over ranks
  // (mfu = model FLOP/s ÷ peak_flops_total), what the peak is and a short form for the line
  // ("5.32T AMX"). peak_flops_total 0: no peak known, the MFU is n/a (null in the JSON).
  double peak_flops = 0, peak_flops_total = 0;
  std::string peak_source, peak_short;
};

// The MFU fields of a step or summary record: "mfu", "peak_flops", "peak_flops_total" (null when
// no peak is known) and "peak_source".
void add_mfu_json(nlohmann::json& j, double mfu, double peak_flops, double peak_flops_total, const std::string& source);
// "MFU  31.4% of 5.32T AMX", or "MFU n/a" where no peak is known.
std::string mfu_text(double mfu, double peak_flops_total, const std::string& peak_short);

struct MemoryReport {
  int rank = 0, tp_rank = 0, pp_rank = 0, dp_rank = 0;
  std::vector<int64_t> activation_bytes_per_layer;          // measured
  std::vector<int64_t> activation_bytes_per_layer_formula;  // docs/design.md §4, the same layout
  // MoE layers: the assignments this rank routed and the rows its experts received in the measured
  // forward (the formula's data-dependent inputs; 0 for dense layers). Empty for dense models.
  std::vector<int64_t> moe_assignments, moe_received;
  int64_t activation_bytes_outside_layers = 0, activation_bytes_outside_formula = 0;
  std::map<std::string, int64_t> activation_bytes_by_op;   // measured, first layer and outside
  int64_t activation_peak_bytes = 0;
  int64_t params = 0, grads = 0, optimizer = 0, compute_weights = 0;  // measured model states
  int64_t params_formula = 0, grads_formula = 0, optimizer_formula = 0;  // docs/design.md §8 for this rank
  int64_t transient_peak_bytes = 0;  // ZeRO's gather/scatter buffers, at most at once (measured)
  int64_t model_state_peak_bytes = 0;  // all model-state buffers at once, setup included (measured)
  // Every byte (docs/design.md §4): each category's peak since start, all of them at once (accounted),
  // what requests used of the blocks the process got from the system for them (reserved), and the
  // OS's peak resident set; unaccounted = peak RSS − the reserved peak in the process's RAM (libraries,
  // threads, MPI, metadata). On a GPU the device's blocks are not in the RSS: ram_reserved_peak_bytes
  // leaves them out (the device's own reconciliation is DeviceMemoryReport's).
  std::vector<std::pair<std::string, int64_t>> category_peak_bytes;
  std::vector<std::pair<std::string, int64_t>> accounted_peak_by_category;  // each category at that instant
  int64_t accounted_peak_bytes = 0, reserved_peak_bytes = 0, ram_reserved_peak_bytes = 0, rss_peak_bytes = 0;
  int64_t unaccounted_bytes() const { return rss_peak_bytes - ram_reserved_peak_bytes; }
};

nlohmann::json step_json(const StepReport& r);  // {"event":"step", ...}: a JSON Lines record
void print_step_line(const StepReport& r);       // the human progress line, on stderr
// " (1.234 bits/byte)" after a loss, or "" when unknown (≤ 0).
std::string bits_per_byte_note(double bits_per_byte);
nlohmann::json memory_json(const MemoryReport& m);
void print_memory_table(const MemoryReport& m);
// Bytes each rank sent per group kind in the last step (ring accounting, docs/design.md §5).
void print_comm_report(const nlohmann::json& comm_ranks);
std::string human_bytes(double bytes);

}  // namespace lattice
