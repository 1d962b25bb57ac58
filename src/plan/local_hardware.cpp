#include "plan/local_hardware.hpp"

#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/child_process.hpp"
#include "core/error.hpp"
#include "core/memory_limit.hpp"
#include "plan/comm_table.hpp"
#include "plan/gemm_shapes.hpp"
#include "plan/measure.hpp"

namespace lattice::plan {

double LocalHost::share(double busy) const {
  if (cores <= 0 || threads <= 0) return 1.0;
  return std::min(double(threads), double(cores) / std::max(1.0, busy)) / threads;
}

namespace {

int host_cores() {
  const int n = omp_get_num_procs();
  return n > 0 ? n : std::max(1u, std::thread::hardware_concurrency());
}

// The element-wise rate the saved bench measured (the mean of the kernels' rates), else its triad.
double elementwise_rate_of(const LocalBench& bench) {
  double sum = 0;
  int n = 0;
  for (const auto& [kernel, rate] : bench.elementwise)
    if (kernel != "adamw" && rate > 0) sum += rate, ++n;
  return n ? sum / n : bench.compute.memory_bandwidth;
}

// The host's element-wise rates from `bench`: each kernel's, and their mean where a kernel has none.
// `shared`: measured with every rank of the run computing at once (else slowed by the share).
void take_rates(LocalHost& l, const LocalBench& bench, bool shared) {
  l.elementwise_bandwidth = elementwise_rate_of(bench);
  l.kernel_rates = bench.elementwise;
  l.rates_shared = shared;
}

// Runs `mpirun -np ranks <this binary> bench --save --budget 40` (bounded by `timeout`); true when
// it wrote the file. A tied child (core/child_process.hpp): SIGTERM when plan ends however it ends,
// which `timeout` passes to mpirun and mpirun to its ranks, so stopping plan stops the measurement
// (std::system left mpirun and 64 ranks running).
bool measure_mpi(int ranks, const std::string& path) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> words = {"timeout", "90", "mpirun", "--oversubscribe"};
  if (geteuid() == 0) words.push_back("--allow-run-as-root");
  for (const std::string& w : {std::string("-np"), std::to_string(ranks), self, std::string("bench"),
                               std::string("--save"), std::string("--budget"), std::string("40")})
    words.push_back(w);
  const pid_t child = spawn_tied_child(words, -1, -1, "lattice plan");
  if (child < 0) return false;
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return false;
  std::error_code ec;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && std::filesystem::is_regular_file(path, ec);
}

}  // namespace

Hardware local_hardware(int ranks, int threads, bool announce) {
  require(ranks >= 1 && ranks <= 64, "--hardware local plans ranks on this machine: 1 to 64 (got " +
                                         std::to_string(ranks) + ")");
  Hardware h = hardware_preset("cpu");
  h.name = "local";
  LocalHost& l = h.local;
  l.cores = host_cores(), l.ranks = ranks, l.threads = threads;
  l.gemm = std::make_shared<GemmTimer>(threads);
  h.memory_bytes = int64_t(physical_memory_bytes() / ranks);  // the host's memory, shared by its ranks
  h.devices_per_node = ranks;                                 // one host: no inter-node link
  const std::string path = bench_result_path(ranks);
  const bool oversubscribed = int64_t(ranks) * threads > l.cores;
  std::string rates_from;  // where the element-wise rates came from
  std::error_code ec;
  if (ranks > 1 && !std::filesystem::is_regular_file(path, ec)) {
    if (announce)
      std::fprintf(stderr, "lattice plan: no saved MPI bench for %d ranks (%s): measuring it now (about 40 s)\n",
                   ranks, path.c_str());
    require(measure_mpi(ranks, path), "--hardware local: no MPI bench for " + std::to_string(ranks) + " ranks at " +
                                          path + ", and measuring one failed: run mpirun -np " +
                                          std::to_string(ranks) + " lattice bench --save");
  }
  if (std::filesystem::is_regular_file(path, ec)) {
    const LocalBench bench = read_local_bench(path);
    l.source = path;
    if (!bench.comm.empty()) l.comm = std::make_shared<CommTable>(bench.comm);
    // A bench cut short by its --budget plans larger messages off the last sizes it reached: a TP
    // step's all-gather, timed at 8 KiB only, came out 100 times the full bench's. Said, not hidden.
    if (announce && bench.comm_cells_left_out > 0)
      std::fprintf(stderr,
                   "lattice plan: warning: the MPI bench %s left %d cells unmeasured (its --budget ran out): "
                   "messages larger than an operation's largest measured size are extrapolated from it%s\n",
                   path.c_str(), bench.comm_cells_left_out,
                   bench.comm_seconds < 55 ? ("; mpirun -np " + std::to_string(ranks) +
                                              " lattice bench --save --budget 60 measures more").c_str()
                                           : " (60 s, the most --budget allows, did not reach them)");
    if (bench.threads_per_rank == threads && bench.compute.memory_bandwidth > 0 && !oversubscribed) {
      // Measured by this many ranks of these threads at once: the sharing of the cores is in them.
      take_rates(l, bench, bench.ranks == ranks);
      rates_from = path;
    }
    h.peak_flops_fp32 = bench.compute.gemm_fp32_flops > 0 ? bench.compute.gemm_fp32_flops : h.peak_flops_fp32;
    h.peak_flops_bf16 = bench.compute.gemm_bf16_flops > 0 ? bench.compute.gemm_bf16_flops : h.peak_flops_bf16;
  }
  // More ranks than the cores hold: the ranks' kernels take turns on the cores, and a rate timed while
  // they do is a slice of the scheduler's, not the kernel's. The rates come instead from the bench of
  // as many ranks as the cores hold (each with its core, the memory shared as in the run), slowed by
  // the share of the cores (LocalHost::share).
  const std::string full_cores_path = bench_result_path(std::max(1, l.cores / threads));
  if (oversubscribed && std::filesystem::is_regular_file(full_cores_path, ec)) {
    const LocalBench bench = read_local_bench(full_cores_path);
    if (bench.threads_per_rank == threads && bench.ranks * threads <= l.cores) {
      take_rates(l, bench, false);
      rates_from = full_cores_path + " (as many ranks as cores)";
    }
  }
  if (l.elementwise_bandwidth <= 0) {
    // Measured now, at the run's threads, as the bench measures them (operands out of cache), so one
    // rank and many are charged from the same kind of figure; with one rank the sharing is in them.
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const Measurement m = measure_this_machine(0.1);
    LocalBench now;
    now.compute = m;
    now.elementwise = measure_elementwise(0.5 / 16);
    omp_set_num_threads(saved);
    take_rates(l, now, ranks == 1);
    h.peak_flops_fp32 = m.gemm_fp32_flops, h.peak_flops_bf16 = m.gemm_bf16_flops;
    if (l.source.empty()) l.source = "measured now";
    rates_from = "measured now";
  }
  h.memory_bandwidth = l.elementwise_bandwidth;
  if (announce && rates_from == l.source)
    std::fprintf(stderr, "lattice plan: hardware local: %d rank(s) × %d thread(s) on %d cores; MPI and rates from %s\n",
                 ranks, threads, l.cores, l.source.c_str());
  else if (announce)
    std::fprintf(stderr,
                 "lattice plan: hardware local: %d rank(s) × %d thread(s) on %d cores; MPI from %s; element-wise rates "
                 "from %s\n",
                 ranks, threads, l.cores, l.source.c_str(), rates_from.c_str());
  return h;
}

}  // namespace lattice::plan
