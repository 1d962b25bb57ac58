#pragma once
// A checkpoint directory: model.safetensors (Hugging Face GPT-2 names, Conv1D [in, out] layout,
// fp32, unpadded vocabulary rows), optimizer.safetensors (AdamW moments under the same names),
// trainer.json (step, configs, seed). Written to a temporary directory, fsynced, renamed.
#include <string>

#include <nlohmann/json.hpp>

#include "core/atomic_dir.hpp"
#include "model/gpt.hpp"
#include "optim/optimizer.hpp"

namespace lattice::checkpoint {

// The whole model in one rank's layout (ParamTable(config) without tensor parallelism): what a
// checkpoint stores. Tensor-parallel runs gather their shards into it first.
struct FullState {
  const float* params = nullptr;
  std::string optimizer;  // empty: no optimizer.safetensors written
  // Element states in the parameters' layout ("exp_avg." + the parameter's name), and the
  // optimizer's small per-tensor vectors under their own names.
  std::vector<std::pair<std::string, const float*>> element_states;
  std::vector<std::pair<std::string, std::vector<float>>> tensor_states;
};
// A checkpoint written to a temporary directory beside `dir`, not yet in place: commit() swaps it
// in (after checking `dir` may still be replaced); destroying it uncommitted removes it and leaves
// the previous checkpoint as it was. The directory's manifest (kManifest) lists every file in it.
class StagedCheckpoint {
 public:
  StagedCheckpoint(const std::string& dir, const ModelConfig& config, const FullState& state,
                   const nlohmann::json& trainer_state);
  void commit();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  AtomicDir out_;
};
inline constexpr const char* kManifest = "lattice-checkpoint.json";

// Writes and commits at once.
void save_checkpoint(const std::string& dir, const ModelConfig& config, const FullState& state,
                     const nlohmann::json& trainer_state);

// Throws InputError unless `dir` may receive a checkpoint: it does not exist (its parents can be
// made), or it is an empty directory, or a lattice checkpoint (a manifest) holding no file its
// manifest does not list. Nothing else is ever replaced (a --save pointing at a data directory).
void check_save_target(const std::string& dir);

// trainer.json of a checkpoint directory (throws InputError naming the problem).
nlohmann::json read_trainer_state(const std::string& dir);
// What a resume reads from trainer.json, every field checked (InputError naming the field).
struct ResumeState {
  ModelConfig model;
  int64_t step = 0;
  uint64_t seed = 0;
  int64_t updates_applied = 0;
  double loss_scale = 0;  // 0: not recorded (not an fp16 run)
  int64_t clean_steps = 0;
  int64_t global_batch = 0;  // 0: not recorded
  int shuffle = -1;          // -1: not recorded
};
ResumeState read_resume_state(const std::string& dir);

// The model configuration as trainer.json records it ("model"), and read back from a checkpoint.
nlohmann::json model_config_json(const ModelConfig& config);
ModelConfig read_model_config(const std::string& dir);

// Loads weights into `model` (this rank's shard) from a checkpoint directory, a model.safetensors
// file or an llm.c gpt2 .bin (version 3, fp32). Shapes must match the model's configuration.
void load_weights(const std::string& path, GPT& model);
// Loads an optimizer's states from a checkpoint directory: each element state's owned pieces out of
// this rank's layout, each tensor state by name (a vector saved longer or shorter — the
// vocabulary padding of another TP size — is cut or zero-filled at its end).
void load_optimizer(const std::string& dir, const GPT& model, Optimizer& optimizer);

}  // namespace lattice::checkpoint
