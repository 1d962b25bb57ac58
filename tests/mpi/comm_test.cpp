// The MPI backend under mpirun: every collective against its dense result, the groups that
// MPI_Comm_split built against src/parallel/groups, the byte counters, and (with a scenario flag)
// the fault paths. Run: mpirun -np 4 comm_test [--tp t] [--pp p] [--ep e] [--throw-on-rank r |
// --terminate-on-rank r | --die-on-rank r]. Exit 0 when every check passed on every rank.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/distributed.hpp"
#include "comm/fault.hpp"

using namespace lattice;
using namespace lattice::comm;

namespace {

struct Options {
  int tp = 2, pp = 2, ep = 1;
  int throw_on = -1, terminate_on = -1, die_on = -1;
};

class Checks {
 public:
  explicit Checks(int rank) : rank_(rank) {}
  void expect(bool ok, const std::string& what) {
    ++count_;
    if (!ok) {
      ++failed_;
      std::fprintf(stderr, "rank %d: FAIL %s\n", rank_, what.c_str());
    }
  }
  int count() const { return count_; }
  int failed() const { return failed_; }

 private:
  int rank_, count_ = 0, failed_ = 0;
};

std::vector<float> iota_from(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + float(i);
  return v;
}

// The world ranks of a communicator's members in its rank order, gathered through the backend.
std::vector<int> members(Communicator& c, int world_rank) {
  const float mine = float(world_rank);
  std::vector<float> all(size_t(c.size()));
  c.all_gather({&mine, 1}, all);
  return std::vector<int>(all.begin(), all.end());
}

void check_groups(Distributed& d, Checks& ck) {
  const auto& g = d.groups();
  auto check = [&](Communicator& c, const std::vector<int>& want, const char* name) {
    ck.expect(members(c, d.rank()) == want, std::string(name) + " group members match parallel::groups_of");
    ck.expect(c.size() == int(want.size()), std::string(name) + " size");
  };
  std::vector<int> world(size_t(d.world_size()));
  for (int r = 0; r < d.world_size(); ++r) world[size_t(r)] = r;
  check(d.world(), world, "world");
  check(d.tp(), g.tp, "tp");
  check(d.dp(), g.dp, "dp");
  check(d.pp(), g.pp, "pp");
  check(d.model(), g.model, "model");
  ck.expect(d.in_embedding_group() == !g.embedding.empty(), "embedding membership");
  if (d.in_embedding_group()) check(d.embedding(), g.embedding, "embedding");
  ck.expect(d.tp().rank() == d.coords().tp_rank, "tp rank = tp_rank");
  ck.expect(d.dp().rank() == d.coords().dp_rank, "dp rank = dp_rank");
  ck.expect(d.pp().rank() == d.coords().pp_rank, "pp rank = pp_rank (stage)");
  check(d.ep(), g.ep, "ep");
  check(d.expert_dp(), g.expert_dp, "expert_dp");
  ck.expect(d.ep().rank() == d.coords().ep_rank, "ep rank = dp_rank % e");
  ck.expect(d.expert_dp().rank() == d.coords().expert_dp_rank, "expert_dp rank = dp_rank / e");
  ck.expect(d.ep().kind() == GroupKind::ep && d.expert_dp().kind() == GroupKind::expert_dp, "expert group kinds");
}

// The EP and expert-DP groups of the 4-rank layouts with e = 2, written out by hand (§9).
void check_expert_groups_by_hand(Distributed& d, Checks& ck) {
  const auto& l = d.layout();
  if (l.world != 4 || l.ep != 2 || l.pp != 1) return;
  const int r = d.rank();
  std::vector<std::vector<int>> ep, edp;  // by world rank
  if (l.tp == 1) {  // N_d = 4: EP {0,1} {2,3}, expert-DP {0,2} {1,3}
    ep = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    edp = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  } else if (l.tp == 2) {  // N_d = 2: EP {0,2} {1,3} (stride t), expert-DP every rank alone
    ep = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    edp = {{0}, {1}, {2}, {3}};
  } else {
    return;
  }
  ck.expect(members(d.ep(), r) == ep[size_t(r)] && d.ep().size() == int(ep[size_t(r)].size()), "EP group by hand");
  ck.expect(members(d.expert_dp(), r) == edp[size_t(r)] && d.expert_dp().size() == int(edp[size_t(r)].size()),
            "expert-DP group by hand");
  const int ep_rank = r == ep[size_t(r)][0] ? 0 : 1;
  ck.expect(d.ep().rank() == ep_rank, "EP rank by hand");
}

void check_all_reduce(Distributed& d, Checks& ck) {
  // Large enough for MPI's rendezvous / shared-memory paths, small enough for exact float sums.
  for (Communicator* c : {&d.tp(), &d.dp(), &d.world()}) {
    const auto who = members(*c, d.rank());
    const size_t n = 1 << 18;
    std::vector<float> v = iota_from(n, float(d.rank() * 8));
    c->all_reduce(v);
    bool ok = true;
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int m : who) want += float(m * 8) + float(i);
      ok = ok && v[i] == want;
    }
    ck.expect(ok, std::string("all_reduce sum over ") + to_string(c->kind()));

    std::vector<float> m = {float(d.rank()), -float(d.rank()), 7.0f};
    c->all_reduce(m, ReduceOp::max);
    int hi = who.front(), lo = who.front();
    for (int r : who) hi = std::max(hi, r), lo = std::min(lo, r);
    ck.expect(m[0] == float(hi) && m[1] == -float(lo) && m[2] == 7.0f,
              std::string("all_reduce max over ") + to_string(c->kind()));
  }
}

void check_scatter_gather(Distributed& d, Checks& ck) {
  Communicator& w = d.world();
  const int t = w.size(), r = w.rank();
  const size_t chunk = 1000;
  // Rank q's input chunk j holds q·10000 + j·1000 + i; rank r's reduced chunk is Σ_q of chunk r.
  std::vector<float> in(chunk * size_t(t));
  for (int j = 0; j < t; ++j)
    for (size_t i = 0; i < chunk; ++i) in[size_t(j) * chunk + i] = float(r * 10000 + j * 1000) + float(i);
  std::vector<float> out(chunk);
  w.reduce_scatter(in, out);
  bool ok = true;
  for (size_t i = 0; i < chunk; ++i) {
    float want = 0;
    for (int q = 0; q < t; ++q) want += float(q * 10000 + r * 1000) + float(i);
    ok = ok && out[i] == want;
  }
  ck.expect(ok, "reduce_scatter chunks");

  const std::vector<float> mine = iota_from(chunk, float(r * 100000));
  std::vector<float> all(chunk * size_t(t));
  w.all_gather(mine, all);
  ok = true;
  for (int q = 0; q < t; ++q)
    for (size_t i = 0; i < chunk; ++i) ok = ok && all[size_t(q) * chunk + i] == float(q * 100000) + float(i);
  ck.expect(ok, "all_gather in rank order");

  // Uneven chunks (rank q owns q+1 values, rank 0's chunk the largest), as ZeRO's buckets split: the
  // v-collectives' rings must route every chunk, including an empty-ish one, to its owner.
  std::vector<int> counts(static_cast<size_t>(t));
  for (int q = 0; q < t; ++q) counts[size_t(q)] = q == 0 ? 7 : q + 1;
  size_t whole = 0, mine_at = 0;
  for (int q = 0; q < t; ++q) (q < r ? mine_at += size_t(counts[size_t(q)]) : 0), whole += size_t(counts[size_t(q)]);
  std::vector<float> v_in(whole), v_out(static_cast<size_t>(counts[size_t(r)]));
  for (size_t i = 0; i < whole; ++i) v_in[i] = float(r + 1) * float(i + 1);
  w.reduce_scatter_v_async(v_in, v_out, counts).wait();
  ok = true;
  for (size_t i = 0; i < v_out.size(); ++i) ok = ok && v_out[i] == float(t * (t + 1) / 2) * float(mine_at + i + 1);
  ck.expect(ok, "reduce_scatter_v with uneven chunks");
  std::vector<float> v_all(whole, -1.0f);
  for (size_t i = 0; i < v_out.size(); ++i) v_all[mine_at + i] = float(r * 1000) + float(i);
  w.all_gather_v_async({v_all.data() + mine_at, v_out.size()}, v_all, counts).wait();  // in place
  ok = true;
  for (int q = 0, at = 0; q < t; at += counts[size_t(q)], ++q)
    for (int i = 0; i < counts[size_t(q)]; ++i) ok = ok && v_all[size_t(at + i)] == float(q * 1000) + float(i);
  ck.expect(ok, "all_gather_v with uneven chunks, in place");

  const int root = t > 1 ? 1 : 0;
  std::vector<float> b = iota_from(chunk, r == root ? 42.0f : -1.0f);
  w.broadcast(b, root);
  ck.expect(b == iota_from(chunk, 42.0f), "broadcast from a non-zero root");

  // all_to_all: chunk j of rank q lands in chunk q of rank j.
  std::vector<float> send(chunk * size_t(t)), recv(chunk * size_t(t));
  for (int j = 0; j < t; ++j)
    for (size_t i = 0; i < chunk; ++i) send[size_t(j) * chunk + i] = float(r * 100 + j) * 10000 + float(i);
  w.all_to_all(send, recv);
  ok = true;
  for (int q = 0; q < t; ++q)
    for (size_t i = 0; i < chunk; ++i) ok = ok && recv[size_t(q) * chunk + i] == float(q * 100 + r) * 10000 + float(i);
  ck.expect(ok, "all_to_all transposes chunks");
}

// all_to_all_v and all_to_all_counts against tables worked out by hand for groups of 4 and 2.
// send[q][r] floats go from rank q to rank r; element i of that chunk is q·100 + r·10 + i. Zero
// counts included: rank 1 of 4 sends nothing to rank 0 nor to itself, rank 0 of 2 nothing to 1.
struct AllToAllTable {
  std::vector<std::vector<int>> send, recv;  // recv[r][q] = send[q][r]
  std::vector<std::vector<float>> out;       // what rank r receives, in rank order
  std::vector<double> bytes;                 // bytes rank q sends to others
};

const AllToAllTable& table_of(int size) {
  static const AllToAllTable four{{{1, 2, 0, 3}, {0, 0, 4, 1}, {2, 0, 1, 0}, {0, 3, 0, 2}},
                                  {{1, 0, 2, 0}, {2, 0, 0, 3}, {0, 4, 1, 0}, {3, 1, 0, 2}},
                                  {{0, 200, 201},
                                   {10, 11, 310, 311, 312},
                                   {120, 121, 122, 123, 220},
                                   {30, 31, 32, 130, 330, 331}},
                                  {20, 20, 8, 12}};
  static const AllToAllTable two{{{2, 0}, {3, 1}}, {{2, 3}, {0, 1}}, {{0, 1, 100, 101, 102}, {110}}, {0, 12}};
  return size == 4 ? four : two;
}

void check_all_to_all_v(Communicator& c, TrafficLedger& traffic, Checks& ck) {
  if (c.size() != 4 && c.size() != 2) return;
  const AllToAllTable& t = table_of(c.size());
  const int me = c.rank();
  const std::string group = to_string(c.kind());
  const std::vector<int>& send_counts = t.send[size_t(me)];

  traffic.reset();
  std::vector<int> recv_counts(size_t(c.size()), -1);
  c.all_to_all_counts(send_counts, recv_counts);
  ck.expect(recv_counts == t.recv[size_t(me)], "all_to_all_counts over " + group);
  const TrafficEntry counted = traffic.entry(c.kind(), CollectiveOp::all_to_all);
  ck.expect(counted.calls == 1 && counted.sent_bytes == 4.0 * (c.size() - 1) && counted.payload_bytes == 4 * c.size(),
            "all_to_all_counts counts 4 bytes per other rank over " + group);

  std::vector<float> input;
  for (int r = 0; r < c.size(); ++r)
    for (int i = 0; i < send_counts[size_t(r)]; ++i) input.push_back(float(me * 100 + r * 10 + i));
  input.push_back(-7.0f);  // beyond the counts: never sent
  std::vector<float> output(t.out[size_t(me)].size() + 3, -1.0f);  // longer than needed: the tail stays
  traffic.reset();
  c.all_to_all_v(input, send_counts, output, recv_counts);
  std::vector<float> want = t.out[size_t(me)];
  want.insert(want.end(), 3, -1.0f);
  ck.expect(output == want, "all_to_all_v delivers the uneven chunks over " + group);
  const TrafficEntry sent = traffic.entry(c.kind(), CollectiveOp::all_to_all);
  ck.expect(sent.calls == 1 && sent.sent_bytes == t.bytes[size_t(me)],
            "all_to_all_v counts the exact bytes over " + group);
  traffic.reset();

  // Misuse is refused before any message moves (every rank throws, so no rank waits).
  auto refused = [&](auto&& call) {
    try {
      call();
    } catch (const std::logic_error&) {
      return true;
    }
    return false;
  };
  const std::vector<int> short_counts(send_counts.begin(), send_counts.end() - 1);
  std::vector<int> negative = send_counts, self = recv_counts;
  negative[size_t((me + 1) % c.size())] = -1;
  self[size_t(me)] += 1;
  std::vector<float> none;  // every rank of the tables receives something
  ck.expect(refused([&] { c.all_to_all_v(input, short_counts, output, recv_counts); }), "one count per rank");
  ck.expect(refused([&] { c.all_to_all_v(input, negative, output, recv_counts); }), "no negative count");
  ck.expect(refused([&] { c.all_to_all_v(input, send_counts, none, recv_counts); }), "output holds the counts");
  ck.expect(refused([&] { c.all_to_all_v(input, send_counts, output, self); }), "own chunk sent = received");
  ck.expect(refused([&] { c.all_to_all_counts(short_counts, recv_counts); }), "counts: one per rank");
  ck.expect(traffic.total(c.kind()).calls == 0, "refused calls count nothing");
}

void check_point_to_point(Distributed& d, Checks& ck) {
  Communicator& w = d.world();
  const int t = w.size(), r = w.rank();
  // Blocking pairs (0↔1, 2↔3, ...): the even rank sends first so the pair cannot deadlock.
  const int peer = r ^ 1;
  if (peer < t) {
    std::vector<float> out = iota_from(5000, float(r)), in(5000);
    if (r % 2 == 0) {
      w.send(out, peer, 7);
      w.recv(in, peer, 7);
    } else {
      w.recv(in, peer, 7);
      w.send(out, peer, 7);
    }
    ck.expect(in == iota_from(5000, float(peer)), "blocking send/recv pair");
  }
  // Non-blocking ring: everyone sends right and receives from the left at once.
  const int right = (r + 1) % t, left = (r + t - 1) % t;
  std::vector<float> out = iota_from(3000, float(r) * 3), in(3000);
  Handle rx = w.recv_async(in, left, 3);
  Handle tx = w.send_async(out, right, 3);
  tx.wait();
  rx.wait();
  rx.wait();  // idempotent
  ck.expect(!rx.pending() && in == iota_from(3000, float(left) * 3), "non-blocking send/recv ring");
}

void check_async_all_reduce(Distributed& d, Checks& ck) {
  Communicator& dp = d.dp();
  const auto who = members(dp, d.rank());
  // Buckets issued back to back (as backward produces them), waited at the end.
  std::vector<std::vector<float>> buckets;
  for (int b = 0; b < 4; ++b) buckets.push_back(iota_from(size_t(10000 * (b + 1)), float(d.rank() + b)));
  std::vector<Handle> pending;
  for (auto& bucket : buckets) pending.push_back(dp.all_reduce_async(bucket));
  for (auto& h : pending) h.wait();
  bool ok = true;
  for (int b = 0; b < 4; ++b)
    for (size_t i = 0; i < buckets[size_t(b)].size(); ++i) {
      float want = 0;
      for (int m : who) want += float(m + b) + float(i);
      ok = ok && buckets[size_t(b)][i] == want;
    }
  ck.expect(ok, "bucketed all_reduce_async");
  {
    std::vector<float> v(100, 1.0f);
    Handle h = d.world().all_reduce_async(v);
    // Destroyed without wait(): the Handle waits, so v is complete afterwards.
    (void)h;
  }
}

void check_counters(Distributed& d, Checks& ck) {
  d.traffic().reset();
  Communicator& tp = d.tp();
  const int t = tp.size();
  const size_t n = size_t(1024 * t);  // floats; bytes = 4n
  std::vector<float> full(n, 1.0f), shard(n / size_t(t), 1.0f);
  tp.all_reduce(full);
  const TrafficLedger after_all_reduce = d.traffic();
  tp.reduce_scatter(full, shard);
  tp.all_gather(shard, full);
  const TrafficLedger sp = d.traffic().since(after_all_reduce);

  const double bytes = double(n) * 4;
  const TrafficEntry ar = after_all_reduce.total(GroupKind::tp);
  ck.expect(ar.calls == 1 && ar.sent_bytes == 2.0 * (t - 1) / t * bytes && ar.payload_bytes == int64_t(bytes),
            "all_reduce counts 2(t-1)/t·n and payload n");
  ck.expect(sp.entry(GroupKind::tp, CollectiveOp::reduce_scatter).sent_bytes == double(t - 1) / t * bytes,
            "reduce_scatter counts (t-1)/t·n");
  ck.expect(sp.entry(GroupKind::tp, CollectiveOp::all_gather).sent_bytes == double(t - 1) / t * bytes,
            "all_gather counts (t-1)/t·n");
  ck.expect(sp.total(GroupKind::tp).sent_bytes == ar.sent_bytes, "TP+SP moves the bytes of TP (paper §4.3)");
  ck.expect(d.traffic().total(GroupKind::dp).calls == 0, "other groups untouched");

  if (d.pp().size() > 1) {
    Communicator& pp = d.pp();
    std::vector<float> act(256, 0.0f);
    const int stage = pp.rank(), last = pp.size() - 1;
    if (stage < last) pp.send(act, stage + 1);
    if (stage > 0) pp.recv(act, stage - 1);
    const TrafficEntry s = d.traffic().entry(GroupKind::pp, CollectiveOp::send);
    ck.expect(s.sent_bytes == (stage < last ? 1024.0 : 0.0), "send counts n");
    ck.expect(d.traffic().entry(GroupKind::pp, CollectiveOp::recv).sent_bytes == 0, "recv sends nothing");
  }
  d.traffic().reset();
  ck.expect(d.traffic().total(GroupKind::tp).calls == 0, "reset clears the counters");
}

int run_checks(Distributed& d) {
  Checks ck(d.rank());
  check_groups(d, ck);
  check_expert_groups_by_hand(d, ck);
  check_all_to_all_v(d.world(), d.traffic(), ck);
  check_all_to_all_v(d.ep(), d.traffic(), ck);
  check_all_reduce(d, ck);
  check_scatter_gather(d, ck);
  check_point_to_point(d, ck);
  check_async_all_reduce(d, ck);
  check_counters(d, ck);

  float failed = float(ck.failed());
  d.world().all_reduce({&failed, 1});
  if (d.rank() == 0)
    std::printf("comm_test: world %d (t %d, dp %d, p %d, e %d): %d checks per rank, %g failed\n", d.world_size(),
                d.layout().tp, d.layout().dp, d.layout().pp, d.layout().ep, ck.count(), double(failed));
  return failed == 0 ? 0 : 1;
}

[[noreturn]] void throw_injected(const char* what) { throw std::runtime_error(what); }
void must_not_throw() noexcept { throw_injected("uncaught failure"); }

// A failure scenario: `rank` fails while the others wait in a collective that can never finish.
int run_fault(Distributed& d, const Options& o) {
  if (d.rank() == o.throw_on) throw std::runtime_error("injected failure");
  if (d.rank() == o.die_on) std::_Exit(3);  // dies without MPI_Finalize, as a crash would
  if (d.rank() == o.terminate_on) must_not_throw();  // std::terminate, outside any try
  std::vector<float> v(16, 1.0f);
  d.world().all_reduce(v);
  d.world().all_reduce(v);
  return 0;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--tp") o.tp = value;
    else if (flag == "--pp") o.pp = value;
    else if (flag == "--ep") o.ep = value;
    else if (flag == "--throw-on-rank") o.throw_on = value;
    else if (flag == "--terminate-on-rank") o.terminate_on = value;
    else if (flag == "--die-on-rank") o.die_on = value;
    else throw std::invalid_argument("unknown flag " + flag);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    Distributed d(o.tp, o.pp, "comm_test", kDefaultCommTimeout, o.ep);
    const bool fault = o.throw_on >= 0 || o.terminate_on >= 0 || o.die_on >= 0;
    return run_or_abort_all("comm_test", [&] { return fault ? run_fault(d, o) : run_checks(d); });
  } catch (const std::exception& e) {  // a lone process: errors reach main as in lattice
    std::fprintf(stderr, "lattice comm_test: error: %s\n", e.what());
    return 1;
  }
}
