#include "train/checkpoint_stream.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "checkpoint/checkpoint.hpp"
#include "comm/gather_int64.hpp"
#include "tensor/device_memory.hpp"

namespace lattice {

namespace {
// Floats per message: bounds the writer's receive buffer whatever the tensor's size.
constexpr int64_t kMessageFloats = int64_t(1) << 20;
constexpr int kCheckpointTag = 7311;
}  // namespace

CheckpointStream::CheckpointStream(const ModelConfig& config, const ParamTable& local, comm::Distributed* dist)
    : config_(config), local_(local), dist_(dist), whole_(config) {
  local_index_.assign(whole_.params().size(), -1);
  for (size_t i = 0; i < local_.params().size(); ++i) local_index_[size_t(local_.params()[i].full_index)] = int(i);
  const int t = local_.tp_size();
  for (int r = 0; r < t; ++r) tp_tables_.emplace_back(config, t, r);
}

std::vector<CheckpointStream::Span> CheckpointStream::spans_of(
    const std::vector<parallel::ModelStates::SavePiece>& pieces) const {
  std::vector<Span> spans(whole_.params().size());
  const bool first_stage = !dist_ || dist_->coords().pp_rank == 0;
  for (size_t k = 0; k < spans.size(); ++k) {
    if (local_index_[k] < 0) continue;
    const ParamInfo& p = local_.params()[size_t(local_index_[k])];
    // Copies that are the same on several ranks come from one: replicated tensors from TP rank 0,
    // the tied embedding from the first stage (the last one holds it too).
    if (p.split == Split::replicated && local_.tp_rank() != 0) continue;
    if (p.offset == local_.wte() && !first_stage) continue;
    for (const auto& piece : pieces) {
      const int64_t begin = std::max(piece.range.begin, p.offset), end = std::min(piece.range.end, p.offset + p.numel);
      if (begin < end) {
        // A tensor lies in one bucket and a rank holds one piece of each bucket.
        spans[k] = {begin - p.offset, end - p.offset};
        break;
      }
    }
  }
  return spans;
}

const float* CheckpointStream::on_host(const float* values, int64_t n) {
  if (device_memory().host_addressable) return values;
  copy_to_host(from_device_.ensure(n), values, n);
  return from_device_.data();
}

void CheckpointStream::write(const std::string& prefix, const std::vector<parallel::ModelStates::SavePiece>& pieces,
                             TensorSink* out) {
  const std::vector<Span> mine = spans_of(pieces);
  // Everyone's spans on every rank (a few int64 per tensor per rank): the writer knows whom to
  // receive from, the senders need no reply.
  std::vector<int64_t> record = {local_.tp_rank()};
  for (const Span& s : mine) record.insert(record.end(), {s.begin, s.end});
  const auto all = dist_ ? comm::all_gather_int64(dist_->world(), record) : std::vector<std::vector<int64_t>>{record};
  const bool writer = out != nullptr;
  comm::Communicator* world = dist_ ? &dist_->world() : nullptr;

  // The value of local element i of tensor k on this rank.
  auto local_values = [&](size_t k, int64_t i) -> const float* {
    const ParamInfo& p = local_.params()[size_t(local_index_[k])];
    for (const auto& piece : pieces)
      if (p.offset + i >= piece.range.begin && p.offset + i < piece.range.end)
        return piece.values + (p.offset + i - piece.range.begin);
    throw std::logic_error("checkpoint: element " + std::to_string(i) + " of " + p.name + " is not held here");
  };

  for (size_t k = 0; k < whole_.params().size(); ++k) {
    const ParamInfo& w = whole_.params()[k];
    int64_t stored = 1;
    for (int64_t d : checkpoint::stored_shape(w, config_)) stored *= d;
    if (!writer) {
      if (mine[k].begin < mine[k].end) {
        const float* values = local_values(k, mine[k].begin);
        for (int64_t at = mine[k].begin; at < mine[k].end; at += kMessageFloats) {
          const int64_t n = std::min(kMessageFloats, mine[k].end - at);
          world->send({on_host(values + (at - mine[k].begin), n), size_t(n)}, 0, kCheckpointTag);
        }
      }
      continue;
    }
    float* tensor = tensor_.ensure(stored);
    int64_t placed = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      const int64_t begin = all[r][1 + 2 * k], end = all[r][2 + 2 * k];
      if (begin >= end) continue;
      const ParamTable& table = tp_tables_[size_t(all[r][0])];
      const ParamInfo& p = table.params()[k];
      for (int64_t at = begin; at < end; at += kMessageFloats) {
        const int64_t n = std::min(kMessageFloats, end - at);
        const float* values;
        if (r == 0) {
          values = on_host(local_values(k, at), n);
        } else {
          world->recv({message_.ensure(n), size_t(n)}, int(r), kCheckpointTag);
          values = message_.data();
        }
        if (table.tp_size() == 1 || p.split == Split::replicated || p.split == Split::rows) {
          // A run of whole rows in place: one copy (a division per element made a large save slow);
          // the elements at `stored` and beyond are the vocabulary's padding rows.
          const int64_t g = table.global_index(p, at), kept = std::clamp<int64_t>(stored - g, 0, n);
          std::memcpy(tensor + g, values, size_t(kept) * sizeof(float));
          placed += kept;
        } else {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t g = table.global_index(p, at + i);
            if (g < stored) tensor[g] = values[i], ++placed;
          }
        }
      }
    }
    // Every element exactly once: a gap or an overlap here would be a wrong ownership rule.
    if (placed != stored)
      throw std::logic_error("checkpoint: " + w.name + " received " + std::to_string(placed) + " of " +
                             std::to_string(stored) + " elements");
    out->append(prefix + w.name, tensor, size_t(stored) * 4);
  }
  tensor_.clear();
  message_.clear();
  from_device_.clear();
}

}  // namespace lattice
