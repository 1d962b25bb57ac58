#pragma once
// The process's place in the parallel layout: starts MPI, checks the layout, and splits one
// communicator per group kind (TP, DP, PP, embedding, model-parallel, world, EP, expert-DP, CP and
// DP-with-CP) for this rank.
// One Distributed per process, created after flag parsing and kept for the whole run.
//
// Started plainly (not by mpirun) the process is an MPI singleton: world 1, every group of size 1,
// and the singleton is told to skip the network transports so it starts in well under a second.
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "comm/traffic.hpp"
#include "comm/groups.hpp"

namespace lattice::comm {

// True when a launcher (mpirun, srun) started this process; readable before MPI starts.
bool started_by_launcher();
// This process's world rank as the launcher announced it (0 when not launched): lets code that
// runs before MPI starts, such as flag parsing, print its errors from rank 0 only.
int launcher_rank();
// The world size the launcher announced (1 when not launched).
int launcher_size();

inline constexpr double kDefaultCommTimeout = 300;

// Joins MPI (MPI_Init_thread, MPI_THREAD_FUNNELED) for its lifetime and finalizes after. Under a
// launcher, a start that takes more than `start_timeout` seconds (a rank never reached MPI: stopped,
// or stuck before it; 0: wait forever) ends this rank with one line and exit 3, as a stalled peer
// does later (comm/watchdog.hpp), so that the job ends rather than hangs.
class MpiSession {
 public:
  explicit MpiSession(double start_timeout = kDefaultCommTimeout);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

class Distributed {
 public:
  // Checks world % (t·p) == 0 and N_d % e == 0 the way check_on_all_ranks does (one line from
  // rank 0, every rank exits 1; a lone process throws lattice::InputError instead). `command` names
  // the sub-command in error lines ("train" → "lattice train: error: ...").
  // `comm_timeout` (seconds; <= 0: off): the watchdog ends this rank when one wait lasts longer
  // (comm/watchdog.hpp). `ep`: the expert-model-parallel size e, `cp` the context-parallel size c
  // (docs/design.md §9).
  Distributed(int tp, int pp, const std::string& command, double comm_timeout = kDefaultCommTimeout, int ep = 1,
              int cp = 1);
  ~Distributed();  // frees the communicators, then finalizes MPI
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  const parallel::ParallelLayout& layout() const { return layout_; }
  const parallel::RankCoords& coords() const { return coords_; }
  const parallel::RankGroups& groups() const { return groups_; }  // world ranks of this rank's groups
  int rank() const { return rank_; }                                // world rank
  int world_size() const { return layout_.world; }
  // How many ranks share this rank's host (its memory): collective over the world.
  int ranks_on_this_host() const;
  const std::string& command() const { return command_; }

  Communicator& world() { return *world_; }
  Communicator& tp() { return *tp_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  Communicator& model() { return *model_; }  // t·p ranks of one model replica (global grad norm)
  Communicator& ep() { return *ep_; }                // e ranks exchanging tokens (MoE all-to-all)
  Communicator& expert_dp() { return *expert_dp_; }  // N_d/e ranks holding the same experts
  Communicator& cp() { return *cp_; }        // c ranks sharing one sequence (attention's all-to-alls)
  Communicator& dp_cp() { return *dp_cp_; }  // N_d·c ranks holding the same weights (gradient reductions)
  // Only ranks of the first or last pipeline stage are in an embedding group.
  bool in_embedding_group() const { return embedding_ != nullptr; }
  Communicator& embedding();  // std::logic_error when !in_embedding_group()

  // Bytes sent by this rank per group kind; reset it per step, copy it to snapshot.
  TrafficLedger& traffic() { return traffic_; }

 private:
  MpiSession session_;  // first member: MPI outlives every communicator below
  std::string command_;
  TrafficLedger traffic_;
  parallel::ParallelLayout layout_;
  parallel::RankCoords coords_;
  parallel::RankGroups groups_;
  int rank_ = 0;
  std::unique_ptr<Communicator> world_, tp_, dp_, pp_, model_, embedding_, ep_, expert_dp_, cp_, dp_cp_;
};

}  // namespace lattice::comm
