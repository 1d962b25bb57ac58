#pragma once
// A checkpoint directory: model.safetensors (Hugging Face GPT-2 names, Conv1D [in, out] layout,
// fp32, unpadded vocabulary rows), optimizer.safetensors (AdamW moments under the same names),
// trainer.json (step, configs, seed). Written to a temporary directory, fsynced, renamed.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.hpp"
#include "core/atomic_dir.hpp"
#include "core/error.hpp"
#include "core/output_path.hpp"
#include "core/pinned_path.hpp"
#include "model/gpt.hpp"
#include "optim/optimizer.hpp"

namespace lattice::checkpoint {

// A parameter's shape in the file: the whole tensor, the embedding without vocabulary padding.
std::vector<int64_t> stored_shape(const ParamInfo& p, const ModelConfig& config);

// The tensors of model.safetensors in file order: every tensor of ParamTable(config) under its
// Hugging Face name after `prefix`, fp32, the embedding without vocabulary padding.
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& config, const std::string& prefix = "");
// The bytes of a checkpoint's tensors: the model file (twice with a previous version: PipeDream-2BW),
// `element_states` model-shaped optimizer states and `tensor_state_values` fp32 values of its
// per-tensor states; headers and small files aside. What a save needs free beside the one it replaces.
int64_t checkpoint_tensor_bytes(const ModelConfig& config, int element_states, int64_t tensor_state_values,
                                bool previous_version);

// A checkpoint written to a temporary directory beside `dir`, not yet in place. Its files are
// streamed: model_file() and optimizer_file() open writers the caller appends tensors to in file
// order, finish() completes them and adds trainer.json and the manifest (kManifest: every file in
// it). commit() swaps it in (after checking `dir` may still be replaced); destroying it uncommitted
// removes it and leaves the previous checkpoint as it was.
class StagedCheckpoint {
 public:
  explicit StagedCheckpoint(const std::string& dir);
  SafetensorsWriter& model_file(const ModelConfig& config);
  // PipeDream-2BW: model_previous.safetensors, the weight version older than model.safetensors'
  // (the one the next batch reads: docs/design.md §6.3), in model.safetensors' form.
  SafetensorsWriter& previous_model_file(const ModelConfig& config);
  // optimizer.safetensors: each element state under its prefix ("exp_avg." + the parameter's
  // name), then the optimizer's per-tensor vectors.
  SafetensorsWriter& optimizer_file(const ModelConfig& config, const std::string& optimizer,
                                    const std::vector<std::string>& element_prefixes,
                                    const std::vector<TensorSpec>& tensor_states);
  // A small file written whole beside the others (the tokenizer's: data/tokenizer_files.hpp).
  void add_file(const std::string& name, const std::string& contents);
  void finish(const nlohmann::json& trainer_state);
  // fsyncs what finish() wrote (commit() does it too: called first, commit only swaps).
  void sync() { out_.sync(); }
  void commit();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  AtomicDir out_;
  std::unique_ptr<SafetensorsWriter> model_, previous_, optimizer_;
};
inline constexpr const char* kManifest = kCheckpointManifest;  // core/output_path.hpp recognises it
inline constexpr const char* kPreviousModelFile = "model_previous.safetensors";

// Throws InputError unless `dir` may receive a checkpoint (core/output_path.hpp's rule for
// OutputKind::checkpoint_dir): it does not exist (its parents can be made), or it is an empty
// directory, or a lattice checkpoint (a manifest) holding no file its manifest does not list; and
// it is none of `rules.inputs`, nor holds one. Nothing else is ever replaced (a --save pointing at
// a data directory).
void check_save_target(const std::string& dir, const OutputRules& rules = {});

// trainer.json of a checkpoint directory (throws InputError naming the problem).
nlohmann::json read_trainer_state(const std::string& dir);
// Whether `dir` is a lattice checkpoint that records its run (holds a trainer.json, a regular file):
// what a resume or --init takes settings and a model from.
bool holds_trainer_state(const std::string& dir);
// What `dir` holds of an earlier run, for a refusal to replace it: "the checkpoint of an earlier
// run (step 40; L 2, h 64)", "a checkpoint" when its trainer.json cannot be read, "" when it holds
// none (missing, empty, or a directory with neither trainer.json nor a manifest).
std::string held_checkpoint(const std::string& dir);
// What a resume reads from trainer.json, every field checked (InputError naming the field).
struct ResumeState {
  ModelConfig model;
  int64_t step = 0;
  uint64_t seed = 0;
  int64_t updates_applied = 0;
  int weight_versions = 1;  // PipeDream-2BW checkpoints: 2 (model_previous.safetensors)
  double loss_scale = 0;  // 0: not recorded (not an fp16 run)
  int64_t clean_steps = 0;
  nlohmann::json train_settings;  // "train": the run's settings (train/resume_settings.hpp), null if none
  int shuffle = -1;          // -1: not recorded
  std::string train_bin;     // the train.bin it was trained on (data::token_file_fingerprint); "": not recorded
  // The run's last step losses, oldest first ("recent_losses"): the loss-spike guard's window
  // (train/loss_spike_guard.hpp). Empty where not recorded (an older checkpoint).
  std::vector<double> recent_losses;
};
inline constexpr size_t kMaxRecentLosses = 4096;  // a bound on what a resume reads, above any window
ResumeState read_resume_state(const std::string& dir);

// A save swaps a whole new directory in (core/atomic_dir.hpp): a reader without --save's lock (eval,
// sample, and a run reading another run's checkpoint) pins the directory for its whole read
// (core/pinned_path.hpp) and so reads one version to the end, whatever saves land meanwhile. Where no
// pin could be taken (no /proc, too many entries, no descriptors left), a manifest of one version with a
// file of the next is said as this, not as a damaged file; `directory_identity` lets a reader read
// again, whole, when it changed.
class CheckpointReplaced : public InputError {
 public:
  using InputError::InputError;
};
// The directory at a path (core/pinned_path.hpp: a pinned one's as it was pinned).
using lattice::DirectoryIdentity;
using lattice::directory_identity;
// Reads of a checkpoint being replaced, at most: for readers without a pin, and for ranks that each
// pinned another save (a resume under mpirun, read again until all read one). Unpinned, a resume
// constructs its whole trainer between the first file and the check that the directory is still the one
// it began with; under a run saving every 7.7 ms (a 2-layer model) that window lost five reads in a row
// on a loaded machine (cli.hostile_data).
inline constexpr int kCheckpointReadAttempts = 20;
// Which save a checkpoint directory holds, by content: a hash of its manifest, which sums every file
// ("" without one). Ranks reading per-host copies of one save agree; two saves differ.
std::string saved_version(const std::string& dir);
// Throws CheckpointReplaced when `dir` is no longer the directory whose identity was `identity`.
void require_not_replaced(const std::string& dir, const DirectoryIdentity& identity);

// The model configuration as trainer.json records it ("model"), and read back from a checkpoint.
nlohmann::json model_config_json(const ModelConfig& config);
ModelConfig read_model_config(const std::string& dir);
// The precision the run kept its weights in (trainer.json's layout; fp32 when not recorded).
ParamsDType read_params_dtype(const std::string& dir);
// The run's precision as trainer.json records it, for a resume to continue: each field empty where
// the checkpoint does not record it (written before it was), and the fp16 run's loss scale (0: none).
struct RecordedPrecision {
  std::optional<ParamsDType> params;
  std::optional<DType> activations;
  double loss_scale = 0;
  double initial_loss_scale = 0;  // the scale the run started at (0: not recorded)
};
RecordedPrecision read_recorded_precision(const std::string& dir);
// The fingerprint of the tokenizer the run trained with, as trainer.json records it ("" where it
// records none). The tokenizer's own files in the directory are held to it (data::load_recorded_tokenizer).
std::string read_tokenizer_fingerprint(const std::string& dir);
// Hugging Face's config.json for GPT2LMHeadModel with this model's sizes (dense models: GPT-2 has no
// experts), so a checkpoint directory loads with from_pretrained (docs/design.md §14).
inline constexpr const char* kHuggingFaceConfig = "config.json";
std::string hf_gpt2_config(const ModelConfig& config);

// Reads model-shaped arrays of a safetensors file (weights, or optimizer element states under a
// prefix) into pieces of this rank's layout (`table`: its TP shard of its stage), holding one whole
// tensor at a time: a rank never holds a file, nor any tensor it does not need.
class ModelArrayReader {
 public:
  ModelArrayReader(const std::string& file, const ParamTable& table, const ModelConfig& config);
  const SafetensorsFile& file() const { return file_; }
  // Throws InputError if the file holds a tensor the model does not have (another model).
  void check_model_file() const;
  // Elements [range.begin, range.end) of this rank's layout into out[0, range.size()); shapes
  // are checked against the model's (InputError naming the tensor and the file).
  void read(const std::string& prefix, FlatPiece range, float* out);

 private:
  SafetensorsFile file_;
  const ParamTable& table_;
  ModelConfig config_;
  ScratchArray<float> tensor_{MemoryCategory::checkpoint_io, "checkpoint/tensor"};
  std::string held_;  // the tensor in tensor_
  // A device whose memory the host cannot address: a tensor's run of this rank's elements, assembled
  // on the host before it is copied to the device.
  ScratchArray<float> to_device_{MemoryCategory::checkpoint_io, "checkpoint/to_device"};
};

// The model.safetensors a --resume or --init path names: a checkpoint directory (whose
// trainer.json, if any, must describe `config`) or a file. Throws InputError naming the problem.
std::string weights_file(const std::string& path, const ModelConfig& config);
// An llm.c gpt2 .bin (read whole by import_llmc_weights), not a safetensors checkpoint.
bool is_llmc_file(const std::string& path);

// Loads weights into `model` (this rank's shard) from a checkpoint directory, a model.safetensors
// file or an llm.c gpt2 .bin (version 3, fp32). Shapes must match the model's configuration.
void load_weights(const std::string& path, GPT& model);
// Loads an optimizer's states from a checkpoint directory: each element state's owned pieces out of
// this rank's layout (`table`), each tensor state by name (a vector saved longer or shorter — the
// vocabulary padding of another TP size — is cut or zero-filled at its end).
void load_optimizer(const std::string& dir, const ParamTable& table, const ModelConfig& config, Optimizer& optimizer);

}  // namespace lattice::checkpoint
