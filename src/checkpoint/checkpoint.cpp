// Writing and reading a checkpoint directory (checkpoint/checkpoint.hpp). Past the usual length on
// purpose: the save and the load of each part sit together, so their names and layouts cannot drift.
#include "checkpoint/checkpoint.hpp"
#include "tensor/device_memory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/atomic_dir.hpp"
#include "checkpoint/llmc_import.hpp"
#include "checkpoint/safetensors.hpp"
#include "core/env_switch.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/input_file.hpp"

namespace lattice::checkpoint {

namespace fs = std::filesystem;

// What this file's readers open or look up is pinned_path(p) (core/pinned_path.hpp): the pinned
// version's file while the checkpoint is pinned, p itself otherwise.
namespace {
// Whether a file of a checkpoint is there (through the pin). One that cannot be looked up (a loop of
// links, no permission) is named with the reason, by the user's path, never the pin's /proc one.
bool exists_at(const std::string& path) {
  std::error_code ec;
  const bool there = fs::exists(pinned_path(path), ec);
  if (ec) fail("cannot read checkpoint file " + path + ": " + ec.message());
  return there;
}
// The entries of a checkpoint directory: those of the pinned version, or of the directory as it is.
std::vector<std::string> entry_names(const std::string& dir) {
  std::vector<std::string> names;
  if (pinned_names(dir, names)) return names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  return names;
}
}  // namespace

ModelArrayReader::ModelArrayReader(const std::string& file, const ParamTable& table, const ModelConfig& config)
    : file_(SafetensorsFile::open(file)), table_(table), config_(config) {}

void ModelArrayReader::check_model_file() const {
  const ParamTable whole(config_);
  for (const std::string& name : file_.names()) {
    bool known = false;
    for (const auto& p : whole.params()) known = known || p.name == name;
    require(known, file_.path() + " holds " + name + ", which this model (" + std::to_string(config_.layers) +
                       " layers) does not have: it is another model");
  }
}

void ModelArrayReader::read(const std::string& prefix, FlatPiece range, float* out) {
  for (const ParamInfo& p : table_.params()) {
    const int64_t begin = std::max(range.begin, p.offset), end = std::min(range.end, p.offset + p.numel);
    if (begin >= end) continue;
    const std::string name = prefix + p.name;
    const TensorRef& t = file_.get(name, "F32", stored_shape(p, config_));
    const int64_t stored = int64_t(t.bytes / 4);
    if (name != held_) {  // one whole tensor at a time (a shard's elements are scattered in it)
      held_.clear();
      file_.read(name, 0, t.bytes, tensor_.ensure(stored));
      held_ = name;
    }
    const float* src = tensor_.data();
    // The run [begin, end) of `out` is contiguous: placed directly in host memory, else assembled on
    // the host and copied to the device once.
    float* dst = out + (begin - range.begin);
    float* place = device_memory().host_addressable ? dst : to_device_.ensure(end - begin);
    for (int64_t i = begin - p.offset; i < end - p.offset; ++i) {
      const int64_t g = table_.global_index(p, i);
      place[p.offset + i - begin] = g < stored ? src[g] : 0.0f;  // vocabulary padding rows: zero
    }
    if (place != dst) copy_to_device(dst, place, end - begin);
  }
}

std::string weights_file(const std::string& path, const ModelConfig& config) {
  std::error_code ec;
  if (!fs::exists(pinned_path(path), ec)) fail("checkpoint " + path + (ec ? ": " + ec.message() : why_absent(path)));
  if (!fs::is_directory(pinned_path(path), ec)) return path;
  const std::string file = path + "/model.safetensors";
  if (!exists_at(file)) fail("checkpoint " + path + " has no model.safetensors");
  if (exists_at(path + "/trainer.json")) {  // a lattice checkpoint says what model it holds
    // Its shape, every field that differs at once: the sizes, and the experts' count, placement, size
    // and router (whose kind has its own tensors). Dropout and the routing's training values may differ.
    const nlohmann::json saved = model_config_json(read_model_config(path)), mine = model_config_json(config);
    std::string differ;
    const auto compare = [&](const nlohmann::json& a, const nlohmann::json& b, const std::string& key) {
      const nlohmann::json& x = a.contains(key) ? a[key] : nlohmann::json(), &y = b.contains(key) ? b[key] : nlohmann::json();
      if (x != y) differ += (differ.empty() ? "" : "; ") + key + " " + x.dump() + ", this run " + y.dump();
    };
    for (const char* key : {"layers", "hidden", "heads", "seq_len", "vocab"}) compare(saved, mine, key);
    const nlohmann::json none = nlohmann::json::object({{"experts", 0}});
    const nlohmann::json& saved_moe = saved.contains("moe") ? saved["moe"] : none;
    const nlohmann::json& my_moe = mine.contains("moe") ? mine["moe"] : none;
    compare(saved_moe, my_moe, "experts");
    if (saved_moe["experts"] == my_moe["experts"] && saved.contains("moe"))
      for (const char* key : {"layer_freq", "ffn_hidden", "router"}) compare(saved_moe, my_moe, key);
    require(differ.empty(), "checkpoint " + path + " holds another model (" + differ + ")");
  }
  return file;
}

bool is_llmc_file(const std::string& path) {
  std::error_code ec;
  return !fs::is_directory(pinned_path(path), ec) && path.size() > 4 && path.substr(path.size() - 4) == ".bin";
}

std::vector<int64_t> stored_shape(const ParamInfo& p, const ModelConfig& c) {
  if (p.name == "wte.weight") return {c.vocab, c.hidden};
  return p.full_shape;
}

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& config, const std::string& prefix) {
  std::vector<TensorSpec> out;
  const ParamTable table(config);
  for (const auto& p : table.params()) out.push_back({prefix + p.name, "F32", stored_shape(p, config)});
  return out;
}

namespace {
// A 64-bit sum of a file's bytes, read in 64 KiB pieces (no buffer that grows): a changed byte
// anywhere changes it. Written as 16 hex digits.
std::string file_sum(const std::string& path) {
  // O_NONBLOCK and the fstat: a path that became a FIFO or device after the caller's check is not
  // waited on or read forever (its sum is "", which matches no recorded sum).
  const int fd = ::open(pinned_path(path).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  // Gone since the caller's check ("": a save replaced the directory, which the caller tells), or not
  // readable (named, not called damaged).
  if (fd < 0 && errno == ENOENT) return "";
  if (fd < 0) fail("cannot read checkpoint file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return "";
  }
  uint64_t h = 0x9E3779B97F4A7C15ULL, length = 0;
  unsigned char piece[1 << 16];
  for (bool end = false; !end;) {
    size_t n = 0;  // a whole piece but the last, so the sum does not depend on how reads split the file
    while (n < sizeof piece) {
      const ssize_t got = ::read(fd, piece + n, sizeof piece - n);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        ::close(fd);
        return "";
      }
      if (got == 0) {
        end = true;
        break;
      }
      n += size_t(got);
    }
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {  // a word at a time, then the last bytes
      uint64_t word;
      std::memcpy(&word, piece + i, 8);
      h = (h ^ word) * 0x9E3779B97F4A7C15ULL;
      h ^= h >> 29;
    }
    for (; i < n; ++i) h = (h ^ piece[i]) * 0x100000001B3ULL, h ^= h >> 29;
    length += n;
  }
  ::close(fd);
  h ^= length * 0xC2B2AE3D27D4EB4FULL;
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}
// The files a sum guards: every one the save wrote but the manifest itself, the save's marker (the
// writing process's host and pid: no data, and two saves of the same state then write the same
// manifest) and config.json. The binary ones' damage no parser sees (a flipped byte in a tensor's
// data read as a weight), nor a JSON file's that leaves a valid value ("lr": 0.003 read as 0.007,
// one bit), which the field checks accept. config.json, the Hugging Face export, may gain keys for
// other tools; each key lattice reads is checked against trainer.json's model (check_hf_config).
bool summed(const std::string& name) {
  return name != kManifest && name != AtomicDir::kMarker && name != kHuggingFaceConfig &&
         name.find('/') == std::string::npos;
}
// What the model's readers check (`all` false): the weights and optimizer files and trainer.json.
bool read_with_the_model(const std::string& name) {
  return name == "trainer.json" || (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors");
}
}  // namespace

StagedCheckpoint::StagedCheckpoint(const std::string& dir) : dir_(dir), out_(dir) {}

SafetensorsWriter& StagedCheckpoint::model_file(const ModelConfig& config) {
  model_ = std::make_unique<SafetensorsWriter>(out_.path() + "/model.safetensors", model_tensor_specs(config),
                                               std::map<std::string, std::string>{{"format", "pt"}});
  return *model_;
}

SafetensorsWriter& StagedCheckpoint::previous_model_file(const ModelConfig& config) {
  previous_ = std::make_unique<SafetensorsWriter>(out_.path() + "/" + kPreviousModelFile, model_tensor_specs(config),
                                                  std::map<std::string, std::string>{{"format", "pt"}});
  return *previous_;
}

SafetensorsWriter& StagedCheckpoint::optimizer_file(const ModelConfig& config, const std::string& optimizer,
                                                    const std::vector<std::string>& element_prefixes,
                                                    const std::vector<TensorSpec>& tensor_states) {
  std::vector<TensorSpec> specs;
  for (const std::string& prefix : element_prefixes) {
    auto more = model_tensor_specs(config, prefix);
    specs.insert(specs.end(), more.begin(), more.end());
  }
  specs.insert(specs.end(), tensor_states.begin(), tensor_states.end());
  optimizer_ = std::make_unique<SafetensorsWriter>(out_.path() + "/optimizer.safetensors", std::move(specs),
                                                   std::map<std::string, std::string>{{"optimizer", optimizer}});
  return *optimizer_;
}

void StagedCheckpoint::add_file(const std::string& name, const std::string& contents) {
  write_file_atomically(out_.path() + "/" + name, contents.data(), contents.size());
}

void StagedCheckpoint::finish(const nlohmann::json& trainer_state) {
  if (model_) model_->commit();
  if (previous_) previous_->commit();
  if (optimizer_) optimizer_->commit();
  const std::string json = trainer_state.dump(2) + "\n";
  write_file_atomically(out_.path() + "/trainer.json", json.data(), json.size());
  // Last: the manifest of everything written, itself included.
  nlohmann::json files = nlohmann::json::array({kManifest}), sums = nlohmann::json::object();
  for (const auto& e : fs::directory_iterator(out_.path())) {
    const std::string name = e.path().filename().string();
    files.push_back(name);
    if (summed(name)) sums[name] = file_sum(e.path().string());
  }
  const std::string manifest =
      nlohmann::json{{"format", "lattice checkpoint"}, {"version", 1}, {"files", files}, {"sums", sums}}.dump(2) + "\n";
  write_file_atomically(out_.path() + "/" + kManifest, manifest.data(), manifest.size());
}

void StagedCheckpoint::commit() {
  try {
    check_save_target(dir_);  // the directory may have changed since training started
  } catch (const InputError& e) {
    const std::string kept = dir_ + ".unsaved-" + std::to_string(::getpid());
    out_.move_to(kept);
    fail(std::string(e.what()) + " (this run's checkpoint is kept in " + kept + ")");
  }
  out_.commit();
}

void check_save_target(const std::string& dir, const OutputRules& rules) {
  check_output_path(dir, OutputKind::checkpoint_dir, "--save", rules);
}

nlohmann::json read_trainer_state(const std::string& dir) {
  const std::string path = dir + "/trainer.json";
  std::error_code ec;
  if (!fs::exists(pinned_path(dir), ec))  // a loop of links is not "does not exist"
    fail("checkpoint " + dir + (ec ? ": " + ec.message() : why_absent(dir)));
  if (!fs::is_directory(pinned_path(dir), ec)) fail("checkpoint " + dir + " is not a directory (a run's checkpoint is one)");
  if (!exists_at(path))
    fail("checkpoint " + dir + " has no trainer.json: it is not a lattice checkpoint directory" +
         (fs::is_empty(pinned_path(dir), ec) ? std::string(" (it is empty)") : std::string()));
  try {
    return nlohmann::json::parse(read_regular_file(path, "checkpoint file", size_t(64) << 20));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint " + path + " is not valid JSON: " + e.what());
  }
}

nlohmann::json model_config_json(const ModelConfig& c) {
  nlohmann::json j = {{"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
                      {"seq_len", c.seq_len}, {"vocab", c.vocab}, {"dropout", c.dropout}};
  if (c.moe.enabled()) {
    const MoEConfig& m = c.moe;
    j["moe"] = {{"experts", m.experts},          {"layer_freq", m.layer_freq},
                {"topk", m.k()},                 {"ffn_hidden", c.ffn_hidden()},
                {"router", to_string(m.router)}, {"capacity_factor", m.capacity_factor},
                {"drop_policy", to_string(m.drop_policy)}, {"aux_loss_coeff", m.aux_loss_coeff},
                {"load_balancing", m.load_balancing}, {"groups", m.groups},
                {"expert_dropout", m.expert_dropout}, {"init_scale", m.init_scale}};
  }
  return j;
}

namespace {

// A field of trainer.json: present, of the right kind, in range — or one line naming it. (Callers
// passing a literal key copy the result: g++ 13 warns a reference may dangle, the key's temporary.)
const nlohmann::json& field(const nlohmann::json& object, const std::string& key, const std::string& where) {
  require(object.is_object() && object.contains(key), where + " has no \"" + key + "\"");
  return object[key];
}
int64_t integer(const nlohmann::json& object, const std::string& key, int64_t lo, int64_t hi, const std::string& where) {
  const nlohmann::json& v = field(object, key, where);
  require(v.is_number_integer(), where + ": \"" + key + "\" must be an integer (got " + v.dump() + ")");
  // Unsigned values past int64 are out of range too.
  require(!(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) && v.get<int64_t>() >= lo &&
              v.get<int64_t>() <= hi,
          where + ": \"" + key + "\" = " + v.dump() + " is outside [" + std::to_string(lo) + ", " +
              std::to_string(hi) + "]");
  return v.get<int64_t>();
}
double number(const nlohmann::json& object, const std::string& key, double lo, double hi, const std::string& where) {
  const nlohmann::json& v = field(object, key, where);
  require(v.is_number(), where + ": \"" + key + "\" must be a number (got " + v.dump() + ")");
  const double x = v.get<double>();
  require(std::isfinite(x) && x >= lo && x <= hi, where + ": \"" + key + "\" = " + v.dump() + " is out of range");
  return x;
}

// The "model" object of a parsed trainer.json (`where` names the file in messages).
ModelConfig model_config_of(const nlohmann::json& state, const std::string& where) {
  const nlohmann::json m = field(state, "model", where);
  const std::string mw = where + " (model)";
  ModelConfig c;
  c.layers = int(integer(m, "layers", 1, kMaxLayers, mw));
  c.hidden = int(integer(m, "hidden", 1, kMaxHidden, mw));
  c.heads = int(integer(m, "heads", 1, kMaxHidden, mw));
  c.seq_len = int(integer(m, "seq_len", 1, kMaxSeqLen, mw));
  c.vocab = int(integer(m, "vocab", 2, 65536, mw));
  c.dropout = number(m, "dropout", 0.0, 1.0, mw);
  if (m.contains("moe")) {  // a Mixture-of-Experts model (docs/design.md §12)
    const nlohmann::json& x = m["moe"];
    const std::string xw = where + " (model.moe)";
    c.moe.experts = int(integer(x, "experts", 1, 1 << 16, xw));
    c.moe.layer_freq = int(integer(x, "layer_freq", 1, kMaxLayers, xw));
    c.moe.topk = int(integer(x, "topk", 1, 1 << 16, xw));
    c.moe.ffn_hidden = int(integer(x, "ffn_hidden", 1, 4 * int64_t(kMaxHidden), xw));
    c.moe.capacity_factor = number(x, "capacity_factor", 0.0, 1e4, xw);
    c.moe.aux_loss_coeff = number(x, "aux_loss_coeff", 0.0, 1e3, xw);
    c.moe.groups = int(integer(x, "groups", 1, 1 << 20, xw));
    c.moe.expert_dropout = number(x, "expert_dropout", 0.0, 1.0, xw);
    c.moe.init_scale = number(x, "init_scale", 0.0, 100.0, xw);
    const nlohmann::json lb = field(x, "load_balancing", xw);
    require(lb.is_boolean(), xw + ": \"load_balancing\" must be true or false");
    c.moe.load_balancing = lb.get<bool>();
    try {
      const nlohmann::json router = field(x, "router", xw);
      const nlohmann::json policy = field(x, "drop_policy", xw);
      require(router.is_string() && policy.is_string(), xw + ": \"router\" and \"drop_policy\" must be strings");
      c.moe.router = parse_moe_router(router.get<std::string>());
      c.moe.drop_policy = parse_drop_policy(policy.get<std::string>());
    } catch (const InputError& e) {
      fail(xw + ": " + e.what());
    }
  }
  try {
    c.validate();
  } catch (const InputError& e) {
    fail(mw + ": " + e.what());
  }
  return c;
}

}  // namespace

std::string hf_gpt2_config(const ModelConfig& c) {
  // GPT2Config's keys: sizes, the tanh-approximated GELU, LayerNorm's epsilon (kernels/layernorm.cpp),
  // dropout at the embedding, residual and attention sites, the tied output embedding.
  const nlohmann::ordered_json j = {{"architectures", {"GPT2LMHeadModel"}},
                                    {"model_type", "gpt2"},
                                    {"vocab_size", c.vocab},
                                    {"n_positions", c.seq_len},
                                    {"n_ctx", c.seq_len},
                                    {"n_embd", c.hidden},
                                    {"n_layer", c.layers},
                                    {"n_head", c.heads},
                                    {"n_inner", nullptr},
                                    {"activation_function", "gelu_new"},
                                    {"layer_norm_epsilon", 1e-5},
                                    {"resid_pdrop", c.dropout},
                                    {"embd_pdrop", c.dropout},
                                    {"attn_pdrop", c.dropout},
                                    {"initializer_range", 0.02},
                                    {"scale_attn_weights", true},
                                    {"tie_word_embeddings", true},
                                    {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

namespace {
// config.json, written beside the weights for Hugging Face, must describe the same model as
// trainer.json: a hand-edited or broken export is named here, not loaded into transformers as
// another model. Checkpoints written before it existed have none.
void check_hf_config(const std::string& dir, const ModelConfig& c) {
  const std::string path = dir + "/" + kHuggingFaceConfig;
  if (!exists_at(path)) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_regular_file(path, "config.json", size_t(64) << 20));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint " + path + " is not valid JSON: " + e.what());
  }
  require(j.is_object(), "checkpoint " + path + " is not a JSON object");
  const nlohmann::json written = nlohmann::json::parse(hf_gpt2_config(c));
  for (const auto& [key, value] : written.items()) {
    if (key == "resid_pdrop" || key == "embd_pdrop" || key == "attn_pdrop") continue;  // training-only
    require(j.contains(key), "checkpoint " + path + " has no \"" + key + "\" (trainer.json's model gives " +
                                 value.dump() + ")");
    require(j[key] == value, "checkpoint " + path + ": \"" + key + "\" is " + j[key].dump() + ", but trainer.json " +
                                 "and the weights hold " + value.dump() + ": a hand-edited export (rewrite it or remove it)");
  }
}
}  // namespace

namespace {
// A test's stand-in for a slow file system: LATTICE_TEST_PAUSE_SUMS=S pauses S seconds between a
// checkpoint's manifest and its files' sums, at every read (a run saving meanwhile swaps in the next
// save: an unpinned reader then meets its files at every attempt, and gives up; cli.hostile_data).
void test_pause_before_sums() {
  const std::string seconds = env_value("LATTICE_TEST_PAUSE_SUMS");
  if (seconds.empty()) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(seconds.c_str())));
}

// A checkpoint's files against the sums its manifest recorded at the save (checkpoints from before
// sums have none; those from before 2026-11-30 sum the .safetensors files alone): a file changed or
// damaged since is named, not loaded. A file the manifest sums but the directory lacks is named on a
// resume, and left to its reader otherwise. Called after the field checks, so a hand-edited field
// that is invalid gets its own message: the model's readers (eval, sample, --init, and first of all
// a resume) check the binary files and trainer.json (`all` false), a resume every summed file at the
// end of trainer.json's checks (the tokenizer files have their fingerprint checks besides).
void check_file_sums(const std::string& dir, const nlohmann::json& trainer_state, bool all) {
  const std::string path = dir + "/" + kManifest;
  const auto identity = directory_identity(dir);
  // A file that differs from its sum, or is gone, because a save replaced the directory meanwhile.
  const auto replaced = [&] { require_not_replaced(dir, identity); };
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(pinned_path(path), ec))) {
    // Every lattice that records its version in trainer.json writes the manifest (the save's last
    // file, renamed in with the rest): without it nothing can be checked, so it is not loaded.
    require(!trainer_state.contains("lattice_version"),
            "checkpoint " + dir + " has no " + kManifest + ", which the lattice that saved it writes with every "
            "checkpoint: it was removed, so its files' sums cannot be checked (save the run again, or restore the file)");
    return;
  }
  if (!fs::is_regular_file(pinned_path(path), ec)) fail("checkpoint " + path + " is not a regular file");
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_regular_file(path, "checkpoint manifest", size_t(64) << 20));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint " + path + " is not valid JSON: " + e.what());
  }
  // A lattice that records its version sums its .safetensors files (since the same day): a manifest
  // with no sums, or none for a tensor file there, is not taken as a checkpoint of no sums.
  const bool modern = trainer_state.contains("lattice_version");
  require(manifest.is_object() || !modern, "checkpoint " + path + " is not a checkpoint manifest (not a JSON object)");
  if (!manifest.is_object() || (!modern && !manifest.contains("sums"))) return;
  require(manifest.contains("sums"), "checkpoint " + path + " has no \"sums\": its files cannot be checked");
  const nlohmann::json& sums = manifest["sums"];
  require(sums.is_object(), "checkpoint " + path + ": \"sums\" must be an object");
  if (modern)
    for (const std::string& name : entry_names(dir)) {
      require(!read_with_the_model(name) || name == "trainer.json" || sums.contains(name),
              "checkpoint " + path + " records no sum of " + name + ": it cannot be checked");
    }
  test_pause_before_sums();
  for (const auto& [name, sum] : sums.items()) {
    require(sum.is_string() && (summed(name) || name == kHuggingFaceConfig || name == AtomicDir::kMarker),
            "checkpoint " + path + ": \"sums\" holds " + name + " = " + sum.dump() + ", not a file's sum");
    const std::string file = dir + "/" + name;
    if (!summed(name) || (!all && !read_with_the_model(name))) continue;
    // A resume reads every summed file: one gone since the save is named. The model's readers leave a
    // missing file to the reader that needs it (eval needs no optimizer.safetensors).
    if (!fs::exists(fs::symlink_status(pinned_path(file), ec))) {
      if (all) replaced();
      require(!all, "checkpoint " + dir + ": " + name + ", which " + kManifest + " lists with its sum, is missing");
      continue;
    }
    // Before it is read: a FIFO there would block the read forever, a device (a link to /dev/zero)
    // never end it.
    require_regular_file(file, "checkpoint file");
    const bool as_saved = file_sum(file) == sum.get<std::string>();
    if (!as_saved) replaced();
    require(as_saved,
            "checkpoint " + dir + ": " + name + " is not the file the save wrote (its sum differs from the one " +
                kManifest + " recorded): it was changed or damaged since");
  }
}
}  // namespace

void require_not_replaced(const std::string& dir, const DirectoryIdentity& identity) {
  if (directory_identity(dir) != identity)
    throw CheckpointReplaced("checkpoint " + dir + " was replaced by a save while it was read (a run is saving "
                             "into it): read it again");
}

std::string saved_version(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  std::error_code ec;
  if (!fs::is_regular_file(pinned_path(path), ec)) return "";
  std::ifstream in(pinned_path(path), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return hex16(fnv1a(bytes));
}

bool holds_trainer_state(const std::string& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_regular_file(pinned_path(dir + "/trainer.json"), ec);
}

int64_t checkpoint_tensor_bytes(const ModelConfig& config, int element_states, int64_t tensor_state_values,
                                bool previous_version) {
  int64_t model = 0;
  for (const TensorSpec& spec : model_tensor_specs(config)) {
    int64_t n = int64_t(dtype_bytes(spec.dtype));
    for (const int64_t d : spec.shape) n *= d;
    model += n;
  }
  return model * (1 + (previous_version ? 1 : 0) + element_states) + 4 * tensor_state_values;
}

std::string held_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(pinned_path(dir), ec)) return "";
  if (!holds_trainer_state(dir)) return fs::is_regular_file(pinned_path(dir + "/" + kManifest), ec) ? "a checkpoint" : "";
  try {  // trainer.json alone: no file of a large checkpoint is read (its sums) to word a refusal
    const nlohmann::json state = read_trainer_state(dir);
    const ModelConfig model = model_config_of(state, dir);
    return "the checkpoint of an earlier run (step " + std::to_string(integer(state, "step", 0, INT64_MAX / 2, dir)) +
           "; L " + std::to_string(model.layers) + ", h " + std::to_string(model.hidden) + ")";
  } catch (const InputError&) {
    return "a checkpoint";
  }
}

namespace {
// A reader whose file sums met a save swapping the directory in (CheckpointReplaced: a directory that
// could not be pinned, core/pinned_path.hpp) reads it all again, trainer.json first, so what it
// returns is one save's: a few times at most.
template <class Read>
auto reading_again(Read read) {
  for (int attempt = 1;; ++attempt) {
    try {
      return read();
    } catch (const CheckpointReplaced&) {
      if (attempt == kCheckpointReadAttempts) throw;
    }
  }
}
}  // namespace

ModelConfig read_model_config(const std::string& dir) {
  return reading_again([&] {
    const nlohmann::json state = read_trainer_state(dir);
    const ModelConfig c = model_config_of(state, "checkpoint " + dir + "/trainer.json");
    check_hf_config(dir, c);
    check_file_sums(dir, state, false);
    return c;
  });
}

namespace {
// The weights' precision a parsed trainer.json records (`where` names it), or none (written before it was).
std::optional<ParamsDType> recorded_params_dtype(const nlohmann::json& state, const std::string& where) {
  if (!state.contains("layout") || !state["layout"].is_object() || !state["layout"].contains("params_dtype"))
    return std::nullopt;
  const nlohmann::json& d = state["layout"]["params_dtype"];
  require(d.is_string(), where + ": \"params_dtype\" must be fp32, bf16 or fp16 (got " + d.dump() + ")");
  try {
    return parse_params_dtype(d.get<std::string>());
  } catch (const InputError& e) {
    fail(where + ": " + e.what());
  }
}
}  // namespace

ParamsDType read_params_dtype(const std::string& dir) {
  return recorded_params_dtype(read_trainer_state(dir), "checkpoint " + dir + "/trainer.json").value_or(ParamsDType::fp32);
}

RecordedPrecision read_recorded_precision(const std::string& dir) {
  const nlohmann::json state = read_trainer_state(dir);
  RecordedPrecision out;
  const std::string where = "checkpoint " + dir + "/trainer.json";
  const nlohmann::json layout = state.contains("layout") ? state["layout"] : nlohmann::json();
  out.params = recorded_params_dtype(state, where);
  if (layout.is_object() && layout.contains("activation_dtype")) {
    const nlohmann::json& d = layout["activation_dtype"];
    require(d.is_string(), where + ": \"activation_dtype\" must be fp32 or bf16 (got " + d.dump() + ")");
    try {
      out.activations = parse_dtype(d.get<std::string>());
    } catch (const InputError& e) {
      fail(where + ": " + e.what());
    }
  }
  if (state.contains("loss_scale"))
    out.loss_scale = number(field(state, "loss_scale", where), "scale", 1.0, 4294967296.0, where + " (loss_scale)");
  if (state.contains("train") && state["train"].is_object() && state["train"].contains("initial_loss_scale"))
    out.initial_loss_scale = number(state["train"], "initial_loss_scale", 1.0, 4294967296.0, where + " (train)");
  return out;
}

std::string read_tokenizer_fingerprint(const std::string& dir) {
  const nlohmann::json state = read_trainer_state(dir);
  if (!state.contains("tokenizer")) return "";
  const nlohmann::json& t = state["tokenizer"];
  require(t.is_string() && !t.get<std::string>().empty(),
          "checkpoint " + dir + "/trainer.json: \"tokenizer\" must be a tokenizer's fingerprint (got " + t.dump() + ")");
  return t.get<std::string>();
}

namespace {
ResumeState read_resume_state_once(const std::string& dir) {
  const auto state = read_trainer_state(dir);
  const std::string where = "checkpoint " + dir + "/trainer.json";
  ResumeState r;
  r.model = model_config_of(state, where);
  check_hf_config(dir, r.model);
  r.step = integer(state, "step", 0, INT64_MAX / 2, where);
  const nlohmann::json seed = field(state, "seed", where);
  require(seed.is_number_unsigned() || (seed.is_number_integer() && seed.get<int64_t>() >= 0),
          where + ": \"seed\" must be a non-negative integer (got " + seed.dump() + ")");
  r.seed = seed.get<uint64_t>();
  r.updates_applied = state.contains("updates_applied") ? integer(state, "updates_applied", 0, r.step, where) : r.step;
  r.weight_versions = state.contains("weight_versions") ? int(integer(state, "weight_versions", 1, 2, where)) : 1;
  if (state.contains("train")) r.train_settings = state["train"];
  if (state.contains("data_position") && state["data_position"].contains("shuffle")) {
    const nlohmann::json& sh = state["data_position"]["shuffle"];
    require(sh.is_boolean(), where + ": \"shuffle\" must be true or false");
    r.shuffle = sh.get<bool>() ? 1 : 0;
  }
  if (state.contains("data_position") && state["data_position"].contains("train_bin")) {
    const nlohmann::json& file = state["data_position"]["train_bin"];
    require(file.is_string() && file.get<std::string>().size() <= 64,
            where + ": \"train_bin\" must be a string of at most 64 characters");
    r.train_bin = file.get<std::string>();
  }
  if (state.contains("loss_scale")) {
    const nlohmann::json& ls = state["loss_scale"];
    r.loss_scale = number(ls, "scale", 1.0, 4294967296.0, where + " (loss_scale)");
    r.clean_steps = integer(ls, "clean_steps", 0, INT64_MAX / 2, where + " (loss_scale)");
  }
  if (state.contains("recent_losses")) {
    const nlohmann::json& losses = state["recent_losses"];
    require(losses.is_array() && losses.size() <= kMaxRecentLosses,
            where + ": \"recent_losses\" must be an array of at most " + std::to_string(kMaxRecentLosses) + " losses");
    for (const nlohmann::json& loss : losses) {
      require(loss.is_number() && std::isfinite(loss.get<double>()) && loss.get<double>() >= 0,
              where + ": \"recent_losses\" holds " + loss.dump() + ", not a finite loss >= 0");
      r.recent_losses.push_back(loss.get<double>());
    }
  }
  check_file_sums(dir, state, true);
  return r;
}
}  // namespace

ResumeState read_resume_state(const std::string& dir) {
  return reading_again([&] { return read_resume_state_once(dir); });
}

void load_weights(const std::string& path, GPT& model) {
  if (is_llmc_file(path)) {
    import_llmc_weights(path, model);
  } else {
    ModelArrayReader reader(weights_file(path, model.config()), model.table(), model.config());
    reader.check_model_file();
    reader.read("", {0, model.num_params()}, model.params());
  }
  model.refresh_compute_weights();
}

void load_optimizer(const std::string& dir, const ParamTable& table, const ModelConfig& config, Optimizer& optimizer) {
  const std::string file = dir + "/optimizer.safetensors";
  if (!exists_at(file)) fail("checkpoint " + dir + " has no optimizer.safetensors");
  ModelArrayReader reader(file, table, config);
  const SafetensorsFile& st = reader.file();
  const auto kind = st.metadata().find("optimizer");
  const std::string saved = kind == st.metadata().end() ? "adamw" : kind->second;
  if (saved != optimizer.name())
    fail("checkpoint " + dir + " holds " + saved + " states but the run asks for --optimizer " + optimizer.name());
  // Each element state's owned pieces (a ZeRO shard, or all), read straight into place.
  for (const auto& state : optimizer.element_states()) {
    float* out = state.values;
    for (const FlatPiece& piece : optimizer.owned()) {
      reader.read(state.prefix, piece, out);
      out += piece.size();
    }
  }
  for (const auto& state : optimizer.tensor_states()) {
    const TensorRef& t = st.get(state.name);
    if (t.dtype != "F32" || t.shape.size() != 1 || state.shape.size() != 1)
      fail("checkpoint " + file + ": " + state.name + " is not an F32 vector");
    const int64_t n = std::min(t.shape[0], state.shape[0]);
    st.read(state.name, 0, size_t(n) * 4, state.values);
    std::fill(state.values + n, state.values + state.shape[0], 0.0f);
  }
}

}  // namespace lattice::checkpoint
