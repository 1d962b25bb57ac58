#pragma once
// The OpenMPI backend: one MPI communicator per process group. All-reduce, broadcast and all-to-all
// are MPI's own; reduce-scatter and all-gather are rings over MPI_Sendrecv; the "async" collectives
// run eagerly (OpenMPI 4.1's non-blocking collectives progress only inside MPI calls and ran 10-20x
// slower than the blocking ones here: bench/bench_collectives.cpp). Point-to-point stays non-blocking.
#include "comm/communicator.hpp"
#include "comm/mpi_include.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor); never pass MPI_COMM_WORLD itself.
  MpiCommunicator(MPI_Comm comm, GroupKind kind, TrafficLedger* ledger);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }

  // The ring algorithms of docs/design.md §5 over MPI_Sendrecv, chunk r of `counts` being rank r's:
  // what this backend runs for reduce-scatter and all-gather, chosen by bench/bench_collectives.cpp.
  void ring_reduce_scatter(std::span<const float> input, std::span<float> output, std::span<const int> counts);
  void ring_all_gather(std::span<const float> input, std::span<float> output, std::span<const int> counts);

 protected:
  void do_all_reduce(std::span<float> data, ReduceOp op) override;
  void do_reduce_scatter(std::span<const float> input, std::span<float> output) override;
  void do_all_gather(std::span<const float> input, std::span<float> output) override;
  void do_broadcast(std::span<float> data, int root) override;
  void do_all_to_all(std::span<const float> input, std::span<float> output) override;
  void do_all_to_all_v(std::span<const float> input, std::span<const int> send_counts, std::span<float> output,
                       std::span<const int> recv_counts) override;
  void do_all_to_all_counts(std::span<const int> send, std::span<int> recv) override;
  void do_send(std::span<const float> data, int dest, int tag) override;
  void do_recv(std::span<float> data, int source, int tag) override;
  void do_probe(int source, int tag) override;
  void do_barrier() override;
  std::unique_ptr<PendingOp> do_all_reduce_async(std::span<float> data, ReduceOp op) override;
  std::unique_ptr<PendingOp> do_reduce_scatter_v_async(std::span<const float> input, std::span<float> output,
                                                       std::span<const int> counts) override;
  std::unique_ptr<PendingOp> do_all_gather_v_async(std::span<const float> input, std::span<float> output,
                                                   std::span<const int> counts) override;
  std::unique_ptr<PendingOp> do_send_async(std::span<const float> data, int dest, int tag) override;
  std::unique_ptr<PendingOp> do_recv_async(std::span<float> data, int source, int tag) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  // The ring's two chunks: MPI's, so host memory on any device.
  ScratchArray<float> ring_incoming_{MemoryCategory::communication, "ring", /*host_only=*/true};
  ScratchArray<float> ring_sum_{MemoryCategory::communication, "ring", /*host_only=*/true};
};

}  // namespace lattice::comm
