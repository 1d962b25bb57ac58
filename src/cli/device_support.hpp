#pragma once
// What a device other than the CPU runs today (--device cuda, cpu-guarded), decided in one place:
// the dense model in every layout (its communication staged through the host), fp32 or bf16
// activations, every recompute mode and segment plan, fused or unfused attention, fp32/bf16/fp16
// weights, ZeRO 1-3, AdamW with clipping, checkpoints both ways. The rest is refused in one line
// naming the flag, before a model exists (docs/gpu.md, "What runs on a device").
#include <string>

#include "backend/device_ops.hpp"
#include "core/config.hpp"
#include "train/train_config.hpp"

namespace lattice::cli {

// train: the model, the resolved layout and the run's settings. The head dimension is checked
// against the selected device's attention kernels (select_device first).
void require_device_runs(Device device, const ModelConfig& model, const LayoutConfig& layout,
                         const TrainConfig& train);
// bench --layer-costs: the model and the layout, no optimizer.
void require_device_runs(Device device, const ModelConfig& model, const LayoutConfig& layout);
// eval and sample: the model a checkpoint holds.
void require_device_runs(Device device, const ModelConfig& model);

}  // namespace lattice::cli
