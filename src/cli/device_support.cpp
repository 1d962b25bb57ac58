#include "cli/device_support.hpp"

#include "core/error.hpp"

namespace lattice::cli {

namespace {
void refuse_unless(bool ok, Device device, const std::string& what) {
  require(ok, std::string("--device ") + device_name(device) + " does not run " + what +
                  " yet: the dense model (docs/gpu.md, \"What runs on a device\")");
}
}  // namespace

void require_device_runs(Device device, const ModelConfig& model) {
  if (device == Device::cpu) return;
  refuse_unless(!model.moe.enabled(), device, "a Mixture-of-Experts model (--num-experts)");
}

void require_device_runs(Device device, const ModelConfig& model, const LayoutConfig& layout,
                         const TrainConfig& train) {
  if (device == Device::cpu) return;
  require_device_runs(device, model);
  refuse_unless(!layout.fp8_kept, device, "--activation-compression fp8");
  refuse_unless(!layout.pack_masks, device, "--pack-masks");
  refuse_unless(!layout.tied_grads_apart, device, "--tied-embedding-grads apart");
  refuse_unless(train.optim.kind == "adamw", device, "--optimizer " + train.optim.kind);
  refuse_unless(train.optim.offload_dir.empty(), device, "--offload-optimizer");
  refuse_unless(!train.optim.offload_params, device, "--offload-params");
}

}  // namespace lattice::cli
