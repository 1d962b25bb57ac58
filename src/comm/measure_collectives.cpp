#include "comm/measure_collectives.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/mpi_include.hpp"
#include "core/memory_limit.hpp"

namespace lattice::comm {

const char* bench_op_name(BenchOp op) {
  switch (op) {
    case BenchOp::all_reduce: return "all_reduce";
    case BenchOp::reduce_scatter: return "reduce_scatter";
    case BenchOp::all_gather: return "all_gather";
    case BenchOp::all_to_all: return "all_to_all";
    case BenchOp::p2p: return "p2p";
  }
  return "?";
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_ranks_on_host() {
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &host);
  int n = 1;
  MPI_Comm_size(host, &n);
  MPI_Comm_free(&host);
  return n;
}

void world_barrier() { MPI_Barrier(MPI_COMM_WORLD); }

double world_min(double value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  return value;
}

double world_max(double value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

std::vector<GroupShape> layout_group_shapes(int world) {
  std::vector<GroupShape> shapes;
  for (int g = 2; g <= world; ++g)
    if (world % g == 0)
      for (int k = 1; g * k <= world; ++k)
        if (world % (g * k) == 0) shapes.push_back({g, k});
  return shapes;
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// 8 B, 64 B, ... up to `cap`, and `cap` itself last when it is not one of them.
std::vector<int64_t> size_grid(int64_t cap) {
  std::vector<int64_t> sizes;
  for (int64_t b = 8; b <= cap; b *= 8) sizes.push_back(b);
  if (sizes.empty() || sizes.back() < cap) sizes.push_back(cap);
  return sizes;
}

// One group of a shape for this rank: ranks {block·g·k + lane + j·k : j < g}.
std::unique_ptr<MpiCommunicator> split_for(GroupShape s, int rank) {
  const int span = s.size * s.stride, block = rank / span, lane = rank % span % s.stride, j = rank % span / s.stride;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, block * s.stride + lane, j, &comm);
  return std::make_unique<MpiCommunicator>(comm, GroupKind::dp, nullptr);
}

// Floats the engine would pass for `bytes`: a whole number of equal chunks for the collectives.
int64_t floats_for(BenchOp op, int64_t bytes, int g) {
  const int64_t n = std::max<int64_t>(1, bytes / 4);
  if (op == BenchOp::p2p) return n;
  return (n + g - 1) / g * g;
}

// The call a cell times, on `c` with buffers a and b of n floats.
std::function<void()> call_of(BenchOp op, bool engine_async, MpiCommunicator& c, float* a, float* b, int64_t n,
                              const std::vector<int>& counts) {
  const size_t whole = size_t(n), chunk = size_t(n / c.size());
  switch (op) {
    case BenchOp::all_reduce:
      if (engine_async) return [&c, a, whole] { c.all_reduce_async({a, whole}).wait(); };
      return [&c, a, whole] { c.all_reduce({a, whole}); };
    case BenchOp::reduce_scatter:
      if (engine_async)
        return [&c, a, b, whole, chunk, &counts] { c.reduce_scatter_v_async({a, whole}, {b, chunk}, counts).wait(); };
      return [&c, a, b, whole, chunk] { c.reduce_scatter({a, whole}, {b, chunk}); };
    case BenchOp::all_gather:
      if (engine_async)
        return [&c, a, b, whole, chunk, &counts] { c.all_gather_v_async({a, chunk}, {b, whole}, counts).wait(); };
      return [&c, a, b, whole, chunk] { c.all_gather({a, chunk}, {b, whole}); };
    case BenchOp::all_to_all:
      if (engine_async) return [&c, a, b, whole, &counts] { c.all_to_all_v({a, whole}, counts, {b, whole}, counts); };
      return [&c, a, b, whole] { c.all_to_all({a, whole}, {b, whole}); };
    case BenchOp::p2p: {
      // Pairs (0,1), (2,3), ... of the group; a last odd rank waits out the round.
      const int me = c.rank(), peer = me ^ 1;
      if (peer >= c.size()) return [] {};
      const bool first = me % 2 == 0;
      if (engine_async)  // the executor: send_async, a blocking recv, the send drained later
        return [&c, a, b, whole, peer, first] {
          if (first) {
            Handle h = c.send_async({a, whole}, peer);
            c.recv({b, whole}, peer);
            h.wait();
          } else {
            c.recv({b, whole}, peer);
            Handle h = c.send_async({b, whole}, peer);
            h.wait();
          }
        };
      return [&c, a, b, whole, peer, first] {
        if (first) {
          c.send({a, whole}, peer);
          c.recv({b, whole}, peer);
        } else {
          c.recv({b, whole}, peer);
          c.send({b, whole}, peer);
        }
      };
    }
  }
  return [] {};
}

}  // namespace

CollectiveBench measure_collectives(const CollectiveBenchOptions& o) {
  const double start = MPI_Wtime();
  auto elapsed = [&] { return MPI_Wtime() - start; };
  CollectiveBench out;
  out.ranks = world_size();
  out.ranks_on_host = world_ranks_on_host();
  const int rank = world_rank();
  // Three buffers of the cap per rank (two here, the ring's scratch) in half the memory.
  const int64_t fits = int64_t(physical_memory_bytes() / 2 / 3 / std::max(1, out.ranks_on_host));
  out.max_bytes = std::max<int64_t>(8, std::min(o.max_bytes, fits) / 4 * 4);
  out.max_small_bytes = std::max<int64_t>(8, std::min(o.max_small_bytes, out.max_bytes) / 4 * 4);
  auto cap_of = [&](BenchOp op) {
    return op == BenchOp::p2p || op == BenchOp::all_to_all ? out.max_small_bytes : out.max_bytes;
  };

  const std::vector<GroupShape> shapes = layout_group_shapes(out.ranks);
  std::vector<std::unique_ptr<MpiCommunicator>> comms;
  for (const GroupShape& s : shapes) {
    comms.push_back(split_for(s, rank));
    GroupBench g;
    g.shape = s;
    g.concurrent = out.ranks / s.size;
    for (BenchOp op : kBenchOps)
      for (bool async : {false, true}) g.curves.push_back({op, async, {}});
    out.groups.push_back(std::move(g));
  }
  std::vector<int64_t> sizes = size_grid(out.max_bytes);
  for (int64_t b : size_grid(out.max_small_bytes)) sizes.push_back(b);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const size_t buffer = size_t(out.max_bytes / 4 + out.ranks);
  std::vector<float> a(shapes.empty() ? 0 : buffer, 0.0f), b(a.size(), 0.0f);  // zeros: sums stay finite

  // Every cell, in the order measured: sizes ascending, then group shape, op, form.
  struct Cell {
    size_t group, curve;
    int64_t bytes;
  };
  std::vector<Cell> cells;
  for (int64_t bytes : sizes)
    for (size_t g = 0; g < out.groups.size(); ++g)
      for (size_t c = 0; c < out.groups[g].curves.size(); ++c)
        if (bytes <= cap_of(out.groups[g].curves[c].op)) cells.push_back({g, c, bytes});

  std::vector<std::vector<bool>> stopped(out.groups.size(), std::vector<bool>(2 * std::size(kBenchOps), false));
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& cell = cells[i];
    GroupBench& group = out.groups[cell.group];
    BenchCurve& curve = group.curves[cell.curve];
    MpiCommunicator& comm = *comms[cell.group];
    const int min_calls = cell.bytes >= (int64_t(64) << 20) ? std::min(2, o.min_calls) : o.min_calls;
    // Rank 0 decides whether the cell runs and tells everyone, so all ranks make the same calls.
    int run = 1;
    double target = 0;
    if (rank == 0) {
      const double now = elapsed(), remaining = o.budget_s - now;
      double predicted = 0;
      if (!curve.samples.empty()) {
        const BenchSample& prev = curve.samples.back();
        predicted = prev.seconds * double(cell.bytes) / prev.bytes * (1 + min_calls);
      }
      run = !stopped[cell.group][cell.curve] && remaining > 0 && now + predicted <= o.budget_s;
      if (!run) stopped[cell.group][cell.curve] = true;  // its larger sizes cost more still
      target = remaining / double(cells.size() - i);
    }
    MPI_Bcast(&run, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!run) {
      ++out.skipped;
      continue;
    }
    const int64_t n = floats_for(curve.op, cell.bytes, comm.size());
    const std::vector<int> counts(size_t(comm.size()), int(n / comm.size()));
    const std::function<void()> call = call_of(curve.op, curve.engine_async, comm, a.data(), b.data(), n, counts);
    call();  // untimed: first-touch of this size's protocol and the ring's scratch
    const double cell_start = MPI_Wtime();
    std::vector<double> times;
    for (;;) {
      MPI_Barrier(MPI_COMM_WORLD);  // every group starts together, as in a layout
      const double t0 = MPI_Wtime();
      call();
      double t = MPI_Wtime() - t0;
      if (curve.op == BenchOp::p2p) t /= 2;  // one message of the round trip
      // The slowest rank's time, and rank 0's word on whether this was the last call (decided from
      // the calls so far: one reduction per call carries both).
      double word[2] = {t, 0};
      if (rank == 0) {
        const int calls = int(times.size()) + 1;
        const double now = MPI_Wtime();
        word[1] = calls >= o.max_calls ||
                  (calls >= min_calls && (now - cell_start >= target || now - start >= o.budget_s));
      }
      MPI_Allreduce(MPI_IN_PLACE, word, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times.push_back(word[0]);
      if (word[1] > 0) break;
    }
    curve.samples.push_back({double(n) * 4.0, median(times), int(times.size())});
  }
  comms.clear();
  out.seconds = world_max(elapsed());
  return out;
}

}  // namespace lattice::comm
