// Collective algorithms measured against each other on this machine, to choose what the MPI backend
// runs (src/comm/mpi_communicator.hpp): for all-reduce, reduce-scatter and all-gather at the sizes
// lattice moves (SP activations s·b·h, gradient buckets of a GPT-2-small layer), MPI's blocking call,
// MPI's non-blocking call then a wait, lattice's ring over MPI_Sendrecv, and the Communicator call
// lattice's engine makes. Candidates run interleaved, each timed after an untimed call of its own;
// medians of REPS repetitions of the slowest rank's time.
// Usage: mpirun -np 2 build/bench/bench_collectives [REPS]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "comm/mpi_communicator.hpp"

namespace {

struct Candidate {
  std::string name;
  std::function<void()> run;
  std::vector<double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  lattice::comm::MpiCommunicator comm(dup, lattice::comm::GroupKind::dp, nullptr);
  const int p = comm.size(), r = comm.rank();
  // s·b·h of bench/speed.sh's shape (SP's g and ḡ), and a GPT-2-small layer's gradient bucket (12h²+13h).
  const std::vector<std::pair<const char*, size_t>> sizes = {{"SP activation 3 MiB", size_t(256) * 4 * 768},
                                                             {"layer bucket 27 MiB", size_t(12) * 768 * 768 + 13 * 768}};
  if (r == 0) std::printf("%d ranks, %d repetitions, median ms per call\n", p, reps);
  for (const auto& [label, n_raw] : sizes) {
    const size_t n = n_raw / size_t(p) * size_t(p), chunk = n / size_t(p);
    std::vector<float> full(n, 1.0f), part(chunk, 1.0f), gathered(n);
    const std::vector<int> counts(static_cast<size_t>(p), static_cast<int>(chunk));
    auto wait = [](MPI_Request& q) { MPI_Wait(&q, MPI_STATUS_IGNORE); };
    std::vector<Candidate> c = {
        {"all-reduce     MPI_Allreduce", [&] { MPI_Allreduce(MPI_IN_PLACE, full.data(), int(n), MPI_FLOAT, MPI_SUM, dup); }, {}},
        {"all-reduce     MPI_Iallreduce + MPI_Wait", [&] { MPI_Request q; MPI_Iallreduce(MPI_IN_PLACE, full.data(), int(n), MPI_FLOAT, MPI_SUM, dup, &q); wait(q); }, {}},
        {"all-reduce     ring RS + ring AG", [&] { comm.ring_reduce_scatter(full, part, counts); comm.ring_all_gather(part, full, counts); }, {}},
        {"all-reduce     lattice all_reduce_async + wait", [&] { comm.all_reduce_async(full).wait(); }, {}},
        {"reduce-scatter MPI_Reduce_scatter_block", [&] { MPI_Reduce_scatter_block(full.data(), part.data(), int(chunk), MPI_FLOAT, MPI_SUM, dup); }, {}},
        {"reduce-scatter MPI_Ireduce_scatter + MPI_Wait", [&] { MPI_Request q; MPI_Ireduce_scatter(full.data(), part.data(), counts.data(), MPI_FLOAT, MPI_SUM, dup, &q); wait(q); }, {}},
        {"reduce-scatter lattice reduce_scatter", [&] { comm.reduce_scatter(full, part); }, {}},
        {"reduce-scatter ring", [&] { comm.ring_reduce_scatter(full, part, counts); }, {}},
        {"all-gather     MPI_Allgather", [&] { MPI_Allgather(part.data(), int(chunk), MPI_FLOAT, gathered.data(), int(chunk), MPI_FLOAT, dup); }, {}},
        {"all-gather     MPI_Iallgather + MPI_Wait", [&] { MPI_Request q; MPI_Iallgather(part.data(), int(chunk), MPI_FLOAT, gathered.data(), int(chunk), MPI_FLOAT, dup, &q); wait(q); }, {}},
        {"all-gather     ring", [&] { comm.ring_all_gather(part, gathered, counts); }, {}},
        {"all-gather     lattice all_gather", [&] { comm.all_gather(part, gathered); }, {}},
    };
    for (auto& cand : c) cand.run();  // warm-up
    for (int rep = 0; rep < reps; ++rep)
      for (auto& cand : c) {
        // An untimed call first: a call right after MPI_Ireduce_scatter ran up to 10x slower, whatever
        // it was (libnbc's leftovers), which would charge one candidate for another's state.
        cand.run();
        MPI_Barrier(dup);
        const auto t0 = std::chrono::steady_clock::now();
        cand.run();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, dup);  // the slowest rank's time
        cand.seconds.push_back(s);
      }
    if (r == 0) {
      std::printf("%s (%zu floats)\n", label, n);
      for (auto& cand : c) std::printf("  %-48s %9.2f\n", cand.name.c_str(), lattice::bench::median(cand.seconds) * 1e3);
    }
  }
  MPI_Finalize();
  return 0;
}
