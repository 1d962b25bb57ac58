// Adafactor and SM3 against dense double-precision references written here over whole tensors,
// and the same numbers for every layout of the owned elements: one piece, many pieces cutting
// tensors mid-row, ZeRO shards (one owning nothing), tensor-parallel shards. The ranks of a
// layout run on threads joined by an in-process communicator, so the reductions are real.
// Past the usual length on purpose: both optimizers' cases share the references and the layouts they run
// under.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "model/params.hpp"
#include "optim/optimizer.hpp"

using namespace lattice;

namespace {

constexpr int kSteps = 4;
constexpr double kLr = 0.01;

ModelConfig small_model() {
  ModelConfig c;
  c.layers = 2, c.hidden = 8, c.heads = 2, c.seq_len = 8, c.vocab = 30;
  return c;
}

OptimizerConfig config_of(const std::string& kind) {
  OptimizerConfig c;
  c.kind = kind;
  return c;
}

// ---------------------------------------------------------------- data every layout agrees on

// A reproducible value in [-1, 1) for (stream, tensor, whole-tensor element) (splitmix64).
double draw(uint64_t stream, int tensor, int64_t element) {
  uint64_t x = stream * 0x9E3779B97F4A7C15ull + (uint64_t(tensor) << 32) + uint64_t(element);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return double(x >> 11) * 0x1.0p-52 - 1.0;
}

float initial_weight(const ParamInfo& p, int64_t global) { return float(0.1 * draw(1, p.full_index, global)); }

// Uneven magnitudes (so V̂ is far from rank one and clipping bites); 0 on the padded vocabulary.
float gradient(const ParamInfo& p, int64_t step, int64_t global) {
  if (p.name == "wte.weight" && global / p.full_shape[1] >= small_model().vocab) return 0.0f;
  return float(0.01 * draw(100 + uint64_t(step), p.full_index, global) * double(1 + global % 7));
}

int64_t full_numel(const ParamInfo& p) {
  int64_t n = 1;
  for (int64_t d : p.full_shape) n *= d;
  return n;
}

// Whole tensors by checkpoint name: weights (the parameter's name), element states (prefix +
// name) and tensor states (their own names).
using Tensors = std::map<std::string, std::vector<double>>;

// ---------------------------------------------------------------- dense references

// One tensor's reference weights over its whole shape, viewed as rows × cols (a vector is n × 1),
// and its whole gradient at a step.
struct Dense {
  int64_t rows, cols;
  bool matrix;
  std::vector<double> w;
  explicit Dense(const ParamInfo& p)
      : rows(p.full_shape[0]), cols(p.full_shape.size() == 2 ? p.full_shape[1] : 1), matrix(p.full_shape.size() == 2) {
    for (int64_t i = 0; i < full_numel(p); ++i) w.push_back(initial_weight(p, i));
  }
  static std::vector<double> grad(const ParamInfo& p, int64_t step) {
    std::vector<double> g;
    for (int64_t i = 0; i < full_numel(p); ++i) g.push_back(gradient(p, step, i));
    return g;
  }
};

Tensors adafactor_reference(const ParamTable& table, const OptimizerConfig& c, int* clipped) {
  Tensors out;
  for (const ParamInfo& p : table.params()) {
    Dense d(p);
    std::vector<double> r(size_t(d.rows), 0.0), col(size_t(d.cols), 0.0), v(d.w.size(), 0.0);
    for (int64_t t = 1; t <= kSteps; ++t) {
      const std::vector<double> g = Dense::grad(p, t);
      const double b2 = 1.0 - std::pow(double(t), c.adafactor_decay_rate);
      std::vector<double> rsum(r.size(), 0.0), csum(col.size(), 0.0), u(g.size());
      for (int64_t i = 0; i < d.rows; ++i)
        for (int64_t j = 0; j < d.cols; ++j) {
          const double sq = g[size_t(i * d.cols + j)] * g[size_t(i * d.cols + j)] + c.adafactor_eps1;
          rsum[size_t(i)] += sq, csum[size_t(j)] += sq;
          v[size_t(i * d.cols + j)] = b2 * v[size_t(i * d.cols + j)] + (1 - b2) * sq;
        }
      double total = 0;
      for (size_t i = 0; i < r.size(); ++i) total += r[i] = b2 * r[i] + (1 - b2) * rsum[i];
      for (size_t j = 0; j < col.size(); ++j) col[j] = b2 * col[j] + (1 - b2) * csum[j];
      double sum_u2 = 0;
      for (int64_t i = 0; i < d.rows; ++i)
        for (int64_t j = 0; j < d.cols; ++j) {
          const size_t e = size_t(i * d.cols + j);
          const double vhat = d.matrix ? r[size_t(i)] * col[size_t(j)] / total : v[e];
          u[e] = vhat > 0 ? g[e] / std::sqrt(vhat) : 0.0;
          sum_u2 += u[e] * u[e];
        }
      const double clip = std::max(1.0, std::sqrt(sum_u2 / double(u.size())) / c.adafactor_clip);
      *clipped += clip > 1.0;
      const double decay = p.decay ? 1.0 - kLr * c.weight_decay : 1.0;
      for (size_t e = 0; e < u.size(); ++e) d.w[e] = d.w[e] * decay - kLr * u[e] / clip;
    }
    out[p.name] = d.w;
    if (d.matrix) {
      out["exp_avg_sq_row." + p.name] = r;
      out["exp_avg_sq_col." + p.name] = col;
    } else {
      out["exp_avg_sq." + p.name] = v;
    }
  }
  return out;
}

Tensors sm3_reference(const ParamTable& table, const OptimizerConfig& c) {
  Tensors out;
  for (const ParamInfo& p : table.params()) {
    Dense d(p);
    std::vector<double> mu_r(size_t(d.rows), 0.0), mu_c(size_t(d.cols), 0.0), acc(d.w.size(), 0.0), m(d.w.size(), 0.0);
    for (int64_t t = 1; t <= kSteps; ++t) {
      const std::vector<double> g = Dense::grad(p, t);
      std::vector<double> new_r(mu_r.size(), 0.0), new_c(mu_c.size(), 0.0);
      const double decay = p.decay ? 1.0 - kLr * c.weight_decay : 1.0;
      for (int64_t i = 0; i < d.rows; ++i)
        for (int64_t j = 0; j < d.cols; ++j) {
          const size_t e = size_t(i * d.cols + j);
          const double nu = (d.matrix ? std::min(mu_r[size_t(i)], mu_c[size_t(j)]) : acc[e]) + g[e] * g[e];
          acc[e] = nu;
          new_r[size_t(i)] = std::max(new_r[size_t(i)], nu), new_c[size_t(j)] = std::max(new_c[size_t(j)], nu);
          const double u = nu > 0 ? g[e] / std::sqrt(nu) : 0.0;
          m[e] = c.beta1 * m[e] + (1 - c.beta1) * u;
          d.w[e] = d.w[e] * decay - kLr * m[e];
        }
      mu_r = new_r, mu_c = new_c;
    }
    out[p.name] = d.w;
    if (c.beta1 > 0) out["momentum." + p.name] = m;
    if (d.matrix) {
      out["accumulator_row." + p.name] = mu_r;
      out["accumulator_col." + p.name] = mu_c;
    } else {
      out["accumulator." + p.name] = acc;
    }
  }
  return out;
}

// ---------------------------------------------------------------- ranks on threads

// The ranks of one group, each on its own thread: an all_reduce combines their buffers in rank
// order. Calls that disagree in size or op across ranks are recorded, not hidden.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), sync_(size), inputs_(size_t(size)), ops_(size_t(size)) {}
  int size() const { return size_; }
  bool mismatched() const { return mismatched_; }

  void all_reduce(int rank, std::span<float> data, comm::ReduceOp op) {
    inputs_[size_t(rank)] = data, ops_[size_t(rank)] = op;
    sync_.arrive_and_wait();
    if (rank == 0) combine();
    sync_.arrive_and_wait();
    std::copy_n(result_.begin(), std::min(result_.size(), data.size()), data.begin());
    sync_.arrive_and_wait();  // nobody refills inputs_ before every rank has its result
  }

 private:
  void combine() {
    result_.assign(inputs_[0].begin(), inputs_[0].end());
    for (size_t r = 1; r < inputs_.size(); ++r) {
      if (inputs_[r].size() != result_.size() || ops_[r] != ops_[0]) {
        mismatched_ = true;
        continue;
      }
      for (size_t i = 0; i < result_.size(); ++i)
        result_[i] = ops_[0] == comm::ReduceOp::sum ? result_[i] + inputs_[r][i] : std::max(result_[i], inputs_[r][i]);
    }
  }

  int size_;
  std::barrier<> sync_;
  std::vector<std::span<float>> inputs_;
  std::vector<comm::ReduceOp> ops_;
  std::vector<float> result_;
  bool mismatched_ = false;
};

class ThreadComm final : public comm::Communicator {
 public:
  ThreadComm(ThreadGroup& group, int rank) : Communicator(comm::GroupKind::dp, nullptr), group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  int64_t all_reduce_calls = 0;

 protected:
  void do_all_reduce(std::span<float> data, comm::ReduceOp op) override {
    ++all_reduce_calls;
    group_.all_reduce(rank_, data, op);
  }
  void do_reduce_scatter(std::span<const float>, std::span<float>) override { unused(); }
  void do_all_gather(std::span<const float>, std::span<float>) override { unused(); }
  void do_broadcast(std::span<float>, int) override { unused(); }
  void do_all_to_all(std::span<const float>, std::span<float>) override { unused(); }
  void do_all_to_all_v(std::span<const float>, std::span<const int>, std::span<float>, std::span<const int>) override {
    unused();
  }
  void do_all_to_all_counts(std::span<const int>, std::span<int>) override { unused(); }
  void do_send(std::span<const float>, int, int) override { unused(); }
  void do_recv(std::span<float>, int, int) override { unused(); }
  void do_barrier() override { unused(); }
  std::unique_ptr<comm::PendingOp> do_all_reduce_async(std::span<float>, comm::ReduceOp) override { unused(); }
  std::unique_ptr<comm::PendingOp> do_reduce_scatter_v_async(std::span<const float>, std::span<float>,
                                                             std::span<const int>) override {
    unused();
  }
  std::unique_ptr<comm::PendingOp> do_all_gather_v_async(std::span<const float>, std::span<float>,
                                                         std::span<const int>) override {
    unused();
  }
  std::unique_ptr<comm::PendingOp> do_send_async(std::span<const float>, int, int) override { unused(); }
  std::unique_ptr<comm::PendingOp> do_recv_async(std::span<float>, int, int) override { unused(); }

 private:
  [[noreturn]] static void unused() { throw std::logic_error("ThreadComm: the optimizers only all_reduce"); }
  ThreadGroup& group_;
  int rank_;
};

// Who owns what: `tp` tensor-parallel shards, each spread over `shards` ZeRO ranks, either as
// contiguous ranges (cut = 0) or as pieces of `cut` elements dealt out in turn.
struct Layout {
  int tp = 1, shards = 1;
  int64_t cut = 0;
  bool idle_rank = false;  // the last shard rank owns nothing
};

std::vector<std::vector<FlatPiece>> shard_pieces(int64_t total, const Layout& l) {
  const int owners = l.idle_rank ? l.shards - 1 : l.shards;
  std::vector<std::vector<FlatPiece>> pieces(size_t(l.shards));
  if (l.cut == 0) {
    for (int r = 0; r < owners; ++r) pieces[size_t(r)].push_back({total * r / owners, total * (r + 1) / owners});
  } else {
    for (int64_t b = 0, r = 0; b < total; b += l.cut, r = (r + 1) % owners)
      pieces[size_t(r)].push_back({b, std::min(b + l.cut, total)});
  }
  for (auto& p : pieces)
    if (p.empty()) p.push_back({0, 0});  // owns nothing (no pieces at all would mean everything)
  return pieces;
}

struct Rank {
  std::unique_ptr<ParamTable> table;
  std::vector<float> w, g;
  std::unique_ptr<ThreadComm> tp, shard;
  std::unique_ptr<Optimizer> optimizer;
};

struct Outcome {
  Tensors tensors;              // every rank's owned weights and states, at whole-tensor indices
  bool ranks_agree = true;      // copies held by several ranks are bitwise equal
  bool calls_agree = true;      // every group's ranks made matching all_reduce calls
  std::vector<int64_t> calls;   // all_reduce calls per communicator
};

// Writes `value` at tensors[key][index], noting a disagreement with a copy already there.
void record(Outcome& out, const std::string& key, int64_t size, int64_t index, double value) {
  auto& v = out.tensors.try_emplace(key, size_t(size), std::numeric_limits<double>::quiet_NaN()).first->second;
  if (!std::isnan(v[size_t(index)]) && v[size_t(index)] != value) out.ranks_agree = false;
  v[size_t(index)] = value;
}

void collect(const Rank& rank, Outcome& out) {
  const ParamTable& table = *rank.table;
  Optimizer& opt = *rank.optimizer;
  auto element_states = opt.element_states();
  int64_t state_index = 0;
  for (const FlatPiece& piece : opt.owned())
    for (int64_t f = piece.begin; f < piece.end; ++f, ++state_index)
      for (const ParamInfo& p : table.params()) {
        if (f < p.offset || f >= p.offset + p.numel) continue;
        const int64_t global = table.global_index(p, f - p.offset);
        record(out, p.name, full_numel(p), global, rank.w[size_t(f)]);
        for (const auto& e : element_states)
          record(out, e.prefix + p.name, full_numel(p), global, e.values[state_index]);
      }
  for (const auto& t : opt.tensor_states())
    for (int64_t i = 0; i < t.shape[0]; ++i) record(out, t.name, t.shape[0], i, t.values[i]);
}

// kSteps updates of `config`'s optimizer over `layout`. Everything touching the (single-threaded)
// memory tracker happens on this thread; only the updates run on the ranks' threads.
Outcome run_layout(const OptimizerConfig& config, const Layout& layout) {
  std::deque<ThreadGroup> tp_groups, shard_groups;  // barriers do not move
  for (int d = 0; d < layout.shards; ++d) tp_groups.emplace_back(layout.tp);
  for (int r = 0; r < layout.tp; ++r) shard_groups.emplace_back(layout.shards);
  std::vector<Rank> ranks;
  for (int r = 0; r < layout.tp; ++r) {
    const auto pieces = shard_pieces(ParamTable(small_model(), layout.tp, r).total(), layout);
    for (int d = 0; d < layout.shards; ++d) {
      Rank rank;
      rank.table = std::make_unique<ParamTable>(small_model(), layout.tp, r);
      rank.w.resize(static_cast<size_t>(rank.table->total()));
      rank.g.resize(rank.w.size());
      for (const ParamInfo& p : rank.table->params())
        for (int64_t i = 0; i < p.numel; ++i)
          rank.w[size_t(p.offset + i)] = initial_weight(p, rank.table->global_index(p, i));
      if (layout.tp > 1) rank.tp = std::make_unique<ThreadComm>(tp_groups[size_t(d)], r);
      if (layout.shards > 1) rank.shard = std::make_unique<ThreadComm>(shard_groups[size_t(r)], d);
      rank.optimizer = make_optimizer(*rank.table, config, pieces[size_t(d)], {rank.tp.get(), rank.shard.get()});
      ranks.push_back(std::move(rank));
    }
  }
  std::vector<std::thread> threads;
  for (Rank& rank : ranks)
    threads.emplace_back([&rank] {
      for (int64_t t = 1; t <= kSteps; ++t) {
        for (const ParamInfo& p : rank.table->params())
          for (int64_t i = 0; i < p.numel; ++i)
            rank.g[size_t(p.offset + i)] = gradient(p, t, rank.table->global_index(p, i));
        std::vector<PieceData> data;
        for (const FlatPiece& piece : rank.optimizer->owned())
          data.push_back({rank.w.data() + piece.begin, rank.g.data() + piece.begin});
        rank.optimizer->update(data, kLr, t);
      }
    });
  for (auto& t : threads) t.join();
  Outcome out;
  for (const Rank& rank : ranks) {
    collect(rank, out);
    for (const ThreadComm* c : {rank.tp.get(), rank.shard.get()})
      if (c) out.calls.push_back(c->all_reduce_calls);
  }
  for (const auto* groups : {&tp_groups, &shard_groups})
    for (const ThreadGroup& g : *groups) out.calls_agree = out.calls_agree && !g.mismatched();
  return out;
}

// Every tensor of `want` is in `got`, element by element within rel·|want| + rel_to_max·max|want|
// (the second term for results much smaller than the updates that produced them).
void expect_close(const Tensors& got, const Tensors& want, double rel, double rel_to_max) {
  EXPECT_EQ(got.size(), want.size());
  for (const auto& [key, w] : want) {
    const auto it = got.find(key);
    ASSERT_NE(it, got.end()) << "missing " << key;
    ASSERT_EQ(it->second.size(), w.size()) << key;
    double largest = 0;
    for (double x : w) largest = std::max(largest, std::abs(x));
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < w.size(); ++i)
      if (!(std::abs(it->second[i] - w[i]) <= rel * std::abs(w[i]) + rel_to_max * largest))
        bad += 1, first = first < 0 ? int64_t(i) : first;
    const size_t at = size_t(std::max<int64_t>(first, 0));
    EXPECT_EQ(bad, 0) << key << ": first at " << first << ": got " << it->second[at] << ", want " << w[at];
  }
}

// The layouts every optimizer must agree on (tensor-parallel ones have their own padded vocabulary).
const std::vector<Layout> kShardLayouts = {
    {1, 1, 37, false},  // one rank, pieces cutting tensors mid-row
    {1, 3, 0, false},   // ZeRO ranges
    {1, 3, 13, true},   // ZeRO pieces dealt out, one rank owning nothing
};
const std::vector<Layout> kTensorParallelLayouts = {
    {2, 1, 0, false},
    {2, 2, 29, false},
};

// Every rank made `calls_per_group` matching all_reduce calls per step in each of its groups, and
// values held by several ranks (tensor states, replicated tensors) are identical.
void expect_consistent_ranks(const Outcome& o, int64_t calls_per_group) {
  EXPECT_TRUE(o.ranks_agree);
  EXPECT_TRUE(o.calls_agree);
  for (int64_t c : o.calls) EXPECT_EQ(c, calls_per_group * kSteps);
}

// ZeRO layouts must give the one-piece numbers up to float rounding of the reduced statistics;
// tensor-parallel layouts (another padded vocabulary) the dense reference of their own table.
// Why 2e-6 relative (+1e-7 of the largest) holds on any CPU: both sides run the same fp32 code and
// differ only in the order the factored statistics (row/column sums of at most 32 squares here) are
// added, ≤ 32·2^-24 ≈ 1.9e-6 relative in the worst case, halved by the square root the update takes;
// a wrong shard (a piece's statistic missing or counted twice) moves an element by O(kLr) = 1e-2.
// Against the double-precision reference, 1e-5: fp32 rounding of ~10 operations a step over kSteps
// steps, ≤ 40·2^-24 ≈ 2.4e-6 relative, with the sums' 1.9e-6 on top.
void check_layouts(const OptimizerConfig& config, const std::function<Tensors(const ParamTable&)>& reference,
                   int64_t calls_per_group) {
  const Tensors single = run_layout(config, {}).tensors;
  for (const Layout& l : kShardLayouts) {
    SCOPED_TRACE("shards " + std::to_string(l.shards) + " cut " + std::to_string(l.cut));
    const Outcome o = run_layout(config, l);
    expect_consistent_ranks(o, calls_per_group);
    expect_close(o.tensors, single, 2e-6, 1e-7);
  }
  for (const Layout& l : kTensorParallelLayouts) {
    SCOPED_TRACE("tp " + std::to_string(l.tp) + " shards " + std::to_string(l.shards));
    const Outcome o = run_layout(config, l);
    expect_consistent_ranks(o, calls_per_group);
    expect_close(o.tensors, reference(ParamTable(small_model(), l.tp, 0)), 1e-5, 1e-6);
  }
}

}  // namespace

TEST(Adafactor, OnePieceMatchesDenseReference) {
  const OptimizerConfig config = config_of("adafactor");
  int clipped = 0;
  const Tensors want = adafactor_reference(ParamTable(small_model()), config, &clipped);
  EXPECT_GT(clipped, 0) << "the data should exercise update clipping";
  expect_close(run_layout(config, {}).tensors, want, 1e-5, 1e-6);
}

// Two all_reduce rounds per step in each group: the g² statistics, then Σ U².
TEST(Adafactor, PiecesShardsAndTensorParallelGiveTheSameResult) {
  const OptimizerConfig config = config_of("adafactor");
  int clipped = 0;
  check_layouts(config, [&](const ParamTable& table) { return adafactor_reference(table, config, &clipped); }, 2);
}

TEST(SM3, OnePieceMatchesDenseReference) {
  for (double beta1 : {0.9, 0.0}) {
    OptimizerConfig config = config_of("sm3");
    config.beta1 = beta1;
    expect_close(run_layout(config, {}).tensors, sm3_reference(ParamTable(small_model()), config), 1e-5, 1e-6);
  }
}

// One all_reduce (max) per step in each group.
TEST(SM3, PiecesShardsAndTensorParallelGiveTheSameResult) {
  const OptimizerConfig config = config_of("sm3");
  check_layouts(config, [&](const ParamTable& table) { return sm3_reference(table, config); }, 1);
}

// Matrices keep rows + cols floats, other tensors one per element; SM3's momentum is the only
// per-parameter array. The memory tracker's "optimizer" tag sees the same bytes.
TEST(AdafactorSM3, StateBytesAreTheFactoredStatesOnly) {
  const ParamTable table(small_model());
  int64_t tensor_floats = 0, matrix_elements = 0, matrix_floats = 0;
  for (const ParamInfo& p : table.params()) {
    const bool matrix = p.full_shape.size() == 2;
    tensor_floats += matrix ? p.full_shape[0] + p.full_shape[1] : p.numel;
    matrix_elements += matrix ? p.numel : 0;
    matrix_floats += matrix ? p.full_shape[0] + p.full_shape[1] : 0;
  }
  MemoryTracker& tracker = MemoryTracker::model_states();
  auto measured = [&](const std::string& kind, double beta1, std::vector<FlatPiece> owned) {
    OptimizerConfig config = config_of(kind);
    config.beta1 = beta1;
    const int64_t before = tracker.live_bytes_of_op("optimizer");
    const auto opt = make_optimizer(table, config, std::move(owned));
    EXPECT_EQ(opt->name(), kind);
    EXPECT_EQ(tracker.live_bytes_of_op("optimizer") - before, opt->state_bytes()) << kind;
    return opt->state_bytes();
  };
  const int64_t adamw = measured("adamw", 0.9, {}), adafactor = measured("adafactor", 0.9, {});
  const int64_t sm3 = measured("sm3", 0.9, {}), sm3_plain = measured("sm3", 0.0, {});
  EXPECT_EQ(adafactor, 4 * tensor_floats);
  EXPECT_EQ(sm3, 4 * tensor_floats + 4 * table.total());
  EXPECT_EQ(sm3_plain, 4 * tensor_floats);
  EXPECT_EQ(measured("sm3", 0.9, {{0, 100}, {500, 600}}), 4 * tensor_floats + 4 * 200);  // momentum is sharded
  EXPECT_EQ(adamw, 8 * table.total());
  // Matrices: rows + cols floats against AdamW's two per element, under a tenth even at hidden 8.
  EXPECT_LT(10 * 4 * matrix_floats, 8 * matrix_elements);
  EXPECT_LT(5 * adafactor, adamw);
  std::printf("state bytes (%lld params): adamw %lld, adafactor %lld, sm3 %lld (without momentum %lld)\n",
              (long long)table.total(), (long long)adamw, (long long)adafactor, (long long)sm3, (long long)sm3_plain);
}

// States loaded as zeros (a checkpoint from another TP size pads them so), zero gradients (the
// padded vocabulary, a whole tensor here) and ε₁ = 0 must never divide by zero.
TEST(AdafactorSM3, ZeroStatesAndZeroGradientsGiveFiniteUpdates) {
  const ParamTable table(small_model());
  for (const std::string kind : {"adafactor", "sm3"}) {
    OptimizerConfig config = config_of(kind);
    config.adafactor_eps1 = 0.0;
    const auto opt = make_optimizer(table, config, {});
    std::vector<float> w(static_cast<size_t>(table.total()), 0.5f), g(w.size(), 0.0f);
    const PieceData data{w.data(), g.data()};
    for (int64_t t = 1; t <= 3; ++t) {
      for (const ParamInfo& p : table.params())
        for (int64_t i = 0; i < p.numel; ++i)
          g[size_t(p.offset + i)] = p.name == "h.0.attn.c_proj.weight" ? 0.0f : gradient(p, t, i);
      if (t == 3) {  // as if loaded from a checkpoint that lacked them
        for (const auto& s : opt->tensor_states()) std::fill(s.values, s.values + s.shape[0], 0.0f);
        for (const auto& s : opt->element_states()) std::fill(s.values, s.values + opt->owned_size(), 0.0f);
      }
      opt->update({&data, 1}, kLr, t);
      int64_t bad = 0;
      for (float x : w) bad += !std::isfinite(x);
      for (const auto& s : opt->tensor_states())
        for (int64_t i = 0; i < s.shape[0]; ++i) bad += !std::isfinite(s.values[i]);
      EXPECT_EQ(bad, 0) << kind << " step " << t;
    }
  }
}
