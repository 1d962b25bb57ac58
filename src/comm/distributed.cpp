#include "comm/distributed.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/fault.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"

namespace lattice::comm {

namespace {

std::vector<int> everyone(int world) {
  std::vector<int> all(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) all[size_t(r)] = r;
  return all;
}

bool session_started = false;  // MPI can be initialized once per process

// Splits MPI_COMM_WORLD so that the ranks of each group share a communicator; a rank's rank in
// it is its position in the group's list. Ranks outside every group get no communicator.
std::unique_ptr<Communicator> split(const parallel::Groups& groups, int world_rank, GroupKind kind,
                                    TrafficLedger* ledger) {
  int color = MPI_UNDEFINED, key = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].size(); ++i)
      if (groups[g][i] == world_rank) {
        color = int(g);
        key = int(i);
      }
  MPI_Comm comm = MPI_COMM_NULL;
  {
    const WaitScope wait("split", "world");
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);  // collective over the world
  }
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(comm, kind, ledger);
}

}  // namespace

MpiSession::MpiSession(double start_timeout) {
  if (session_started) throw std::logic_error("MPI can only be started once per process");
  session_started = true;
  if (!started_by_launcher()) {
    // A singleton needs no network: without these OpenMPI probes every transport and spawns a
    // daemon, adding about half a second to a plain `lattice train`. The user's settings win.
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    setenv("OMPI_MCA_pml", "ob1", 0);
    setenv("OMPI_MCA_btl", "self", 0);
  }
  // A test's stand-in for a rank stuck before MPI starts (a hung file system, a stopped process).
  if (const char* delay = std::getenv("LATTICE_TEST_DELAY_MPI_INIT"); delay && started_by_launcher()) {
    const std::string text = delay;
    const size_t colon = text.find(':');
    if (colon != std::string::npos && std::atoi(text.substr(0, colon).c_str()) == launcher_rank())
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(text.substr(colon + 1).c_str())));
  }
  std::mutex mutex;
  std::condition_variable started;
  bool done = false;
  std::thread watch;
  if (started_by_launcher() && launcher_size() > 1 && start_timeout > 0)
    watch = std::thread([&] {
      std::unique_lock<std::mutex> lock(mutex);
      if (started.wait_for(lock, std::chrono::duration<double>(start_timeout), [&] { return done; })) return;
      std::fprintf(stderr,
                   "lattice: rank %d: MPI did not start within %g s (--comm-timeout): a rank never reached it "
                   "(stopped, or stuck before it); stopping (exit 3: rank lost)\n",
                   launcher_rank(), start_timeout);
      std::fflush(stderr);
      std::_Exit(3);
    });
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (watch.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    started.notify_one();
    watch.join();
  }
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    throw std::runtime_error("the MPI library does not support MPI_THREAD_FUNNELED");
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Distributed::Distributed(int tp, int pp, const std::string& command, double comm_timeout, int ep, int cp)
    : session_(comm_timeout), command_(command) {
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world > 1) {
    start_watchdog(comm_timeout, rank_);
    exit_on_mpi_errors();  // a peer that dies: exit 3 with one line, as a stall (comm/watchdog.hpp)
  }
  check_on_all_ranks(command_, [&] {
    try {
      layout_ = parallel::make_layout(world, tp, pp, ep, cp);
    } catch (const InputError& e) {
      if (world == 1 && tp >= 1 && pp >= 1 && ep >= 1 && cp >= 1 && int64_t(tp) * pp * ep * cp > 1)
        fail(std::string(e.what()) + " (start the ranks with mpirun -np N)");
      throw;
    }
  });
  if (world > 1) abort_all_ranks_on_terminate(command_);
  coords_ = parallel::coords_of(layout_, rank_);
  groups_ = parallel::groups_of(layout_, rank_);

  world_ = split({everyone(world)}, rank_, GroupKind::world, &traffic_);
  tp_ = split(parallel::tp_groups(layout_), rank_, GroupKind::tp, &traffic_);
  dp_ = split(parallel::dp_groups(layout_), rank_, GroupKind::dp, &traffic_);
  pp_ = split(parallel::pp_groups(layout_), rank_, GroupKind::pp, &traffic_);
  model_ = split(parallel::model_parallel_groups(layout_), rank_, GroupKind::model, &traffic_);
  embedding_ = split(parallel::embedding_groups(layout_), rank_, GroupKind::embedding, &traffic_);
  ep_ = split(parallel::ep_groups(layout_), rank_, GroupKind::ep, &traffic_);
  expert_dp_ = split(parallel::expert_dp_groups(layout_), rank_, GroupKind::expert_dp, &traffic_);
  cp_ = split(parallel::cp_groups(layout_), rank_, GroupKind::cp, &traffic_);
  dp_cp_ = split(parallel::dp_cp_groups(layout_), rank_, GroupKind::dp, &traffic_);
}

Distributed::~Distributed() {
  // Communicators go before the session finalizes MPI (members die in reverse order anyway;
  // explicit here because MPI_Comm_free after MPI_Finalize is an error).
  dp_cp_.reset();
  cp_.reset();
  expert_dp_.reset();
  ep_.reset();
  embedding_.reset();
  model_.reset();
  pp_.reset();
  dp_.reset();
  tp_.reset();
  world_.reset();
}

Communicator& Distributed::embedding() {
  if (!embedding_)
    throw std::logic_error("rank " + std::to_string(rank_) + " is in no embedding group (not a first or last stage)");
  return *embedding_;
}

int Distributed::ranks_on_this_host() const {
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host);
  int n = 1;
  MPI_Comm_size(host, &n);
  MPI_Comm_free(&host);
  return n;
}

}  // namespace lattice::comm
