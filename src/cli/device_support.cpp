#include "cli/device_support.hpp"

#include "core/error.hpp"

namespace lattice::cli {

namespace {
void refuse_unless(bool ok, Device device, const std::string& what) {
  require(ok, std::string("--device ") + device_name(device) + " does not run " + what +
                  " yet: the dense model (docs/gpu.md, \"What runs on a device\")");
}

// The head dimension against the kernels that will run the attention (device_ops().attention_limits,
// the selected device's): past them the kernel would throw at the first step, after the model,
// data and output were set up.
void require_head_dim_fits(Device device, const ModelConfig& model, const LayoutConfig& layout) {
  const AttentionLimits& limits = device_ops().attention_limits;
  const bool ring = layout.cp > 1 && layout.cp_comm == CpComm::p2p;
  const int64_t limit = ring ? limits.ring_head_dim : layout.fused_attention() ? limits.fused_head_dim : 0;
  if (limit == 0 || model.head_dim() <= limit) return;
  const std::string kernels = ring ? "context parallelism's ring (--cp-comm-type p2p)" : "--attention fused";
  fail(std::string("--device ") + device_name(device) + ": " + kernels + " takes a head dimension up to " +
       std::to_string(limit) + ", and --hidden " + std::to_string(model.hidden) + " / --heads " +
       std::to_string(model.heads) + " is " + std::to_string(model.head_dim()) + " (more heads, or --attention unfused" +
       (ring ? " with --cp-comm-type a2a" : "") + ")");
}
}  // namespace

void require_device_runs(Device device, const ModelConfig& model) {
  if (device == Device::cpu) return;
  refuse_unless(!model.moe.enabled(), device, "a Mixture-of-Experts model (--num-experts)");
}

void require_device_runs(Device device, const ModelConfig& model, const LayoutConfig& layout) {
  if (device == Device::cpu) return;
  require_device_runs(device, model);
  refuse_unless(!layout.fp8_kept, device, "--activation-compression fp8");
  refuse_unless(!layout.pack_masks, device, "--pack-masks");
  refuse_unless(!layout.tied_grads_apart, device, "--tied-embedding-grads apart");
  require_head_dim_fits(device, model, layout);
}

void require_device_runs(Device device, const ModelConfig& model, const LayoutConfig& layout,
                         const TrainConfig& train) {
  if (device == Device::cpu) return;
  require_device_runs(device, model, layout);
  refuse_unless(train.optim.kind == "adamw", device, "--optimizer " + train.optim.kind);
  refuse_unless(train.optim.offload_dir.empty(), device, "--offload-optimizer");
  refuse_unless(!train.optim.offload_params, device, "--offload-params");
}

}  // namespace lattice::cli
