#include "checkpoint/checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_dir.hpp"
#include "checkpoint/llmc_import.hpp"
#include "checkpoint/safetensors.hpp"
#include "core/error.hpp"

namespace lattice::checkpoint {

namespace fs = std::filesystem;

namespace {

// The stored shape of a parameter: the whole tensor, the embedding without vocabulary padding.
std::vector<int64_t> stored_shape(const ParamInfo& p, const ModelConfig& c) {
  if (p.name == "wte.weight") return {c.vocab, c.hidden};
  return p.full_shape;
}

std::vector<TensorRef> tensors_of(const ParamTable& table, const ModelConfig& c, const float* base,
                                  const std::string& prefix) {
  std::vector<TensorRef> out;
  for (const auto& p : table.params()) {
    auto shape = stored_shape(p, c);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    out.push_back({prefix + p.name, "F32", shape, base + p.offset, size_t(n) * 4});
  }
  return out;
}

// Fills this rank's shard of every tensor from the file (padding rows stay zero).
void read_tensors(const SafetensorsFile& file, const GPT& model, float* base, const std::string& prefix) {
  const ParamTable& table = model.table();
  for (const auto& p : table.params()) {
    const auto shape = stored_shape(p, model.config());
    const TensorRef& t = file.get(prefix + p.name, "F32", shape);
    const auto* src = static_cast<const float*>(t.data);
    const int64_t stored = int64_t(t.bytes / 4);
    float* dst = base + p.offset;
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t g = table.global_index(p, i);
      dst[i] = g < stored ? src[g] : 0.0f;
    }
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

void save_checkpoint(const std::string& dir, const ModelConfig& config, const FullState& state,
                     const nlohmann::json& trainer_state) {
  const ParamTable table(config);
  AtomicDir out(dir);
  write_safetensors(out.path() + "/model.safetensors", tensors_of(table, config, state.params, ""),
                    {{"format", "pt"}});
  if (!state.optimizer.empty()) {
    std::vector<TensorRef> tensors;
    for (const auto& [prefix, values] : state.element_states) {
      auto more = tensors_of(table, config, values, prefix);
      tensors.insert(tensors.end(), more.begin(), more.end());
    }
    for (const auto& [name, values] : state.tensor_states)
      tensors.push_back({name, "F32", {int64_t(values.size())}, values.data(), values.size() * 4});
    write_safetensors(out.path() + "/optimizer.safetensors", tensors, {{"optimizer", state.optimizer}});
  }
  const std::string json = trainer_state.dump(2) + "\n";
  write_file_atomically(out.path() + "/trainer.json", json.data(), json.size());
  out.commit();
}

nlohmann::json read_trainer_state(const std::string& dir) {
  const std::string path = dir + "/trainer.json";
  if (!fs::is_directory(dir)) fail("checkpoint " + dir + " is not a directory");
  if (!fs::exists(path)) fail("checkpoint " + dir + " has no trainer.json");
  try {
    return nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint " + path + " is not valid JSON: " + e.what());
  }
}

nlohmann::json model_config_json(const ModelConfig& c) {
  return {{"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
          {"seq_len", c.seq_len}, {"vocab", c.vocab}, {"dropout", c.dropout}};
}

ModelConfig read_model_config(const std::string& dir) {
  const auto state = read_trainer_state(dir);
  try {
    const auto& m = state.at("model");
    ModelConfig c;
    c.layers = m.at("layers"), c.hidden = m.at("hidden"), c.heads = m.at("heads");
    c.seq_len = m.at("seq_len"), c.vocab = m.at("vocab"), c.dropout = m.at("dropout");
    c.validate();
    return c;
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint " + dir + "/trainer.json lacks the model configuration: " + e.what());
  }
}

void load_weights(const std::string& path, GPT& model) {
  if (fs::is_directory(path)) {
    const std::string file = path + "/model.safetensors";
    if (!fs::exists(file)) fail("checkpoint " + path + " has no model.safetensors");
    read_tensors(SafetensorsFile::load(file), model, model.params(), "");
  } else if (path.size() > 4 && path.substr(path.size() - 4) == ".bin") {
    import_llmc_weights(path, model);
  } else {
    read_tensors(SafetensorsFile::load(path), model, model.params(), "");
  }
  model.refresh_compute_weights();
}

void load_optimizer(const std::string& dir, const GPT& model, Optimizer& optimizer) {
  const std::string file = dir + "/optimizer.safetensors";
  if (!fs::exists(file)) fail("checkpoint " + dir + " has no optimizer.safetensors");
  const auto st = SafetensorsFile::load(file);
  const auto kind = st.metadata().find("optimizer");
  const std::string saved = kind == st.metadata().end() ? "adamw" : kind->second;
  if (saved != optimizer.name())
    fail("checkpoint " + dir + " holds " + saved + " states but the run asks for --optimizer " + optimizer.name());
  // Read this rank's whole (TP-shard) layout, keep the owned pieces (a ZeRO shard, or all).
  std::vector<float> full(static_cast<size_t>(model.num_params()));
  for (const auto& state : optimizer.element_states()) {
    read_tensors(st, model, full.data(), state.prefix);
    float* out = state.values;
    for (const FlatPiece& piece : optimizer.owned()) out = std::copy(full.begin() + piece.begin, full.begin() + piece.end, out);
  }
  for (const auto& state : optimizer.tensor_states()) {
    const TensorRef& t = st.get(state.name);
    if (t.dtype != "F32" || t.shape.size() != 1 || state.shape.size() != 1)
      fail("checkpoint " + file + ": " + state.name + " is not an F32 vector");
    const auto* src = static_cast<const float*>(t.data);
    const int64_t n = std::min(t.shape[0], state.shape[0]);
    std::copy(src, src + n, state.values);
    std::fill(state.values + n, state.values + state.shape[0], 0.0f);
  }
}

}  // namespace lattice::checkpoint
