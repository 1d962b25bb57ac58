#include "comm/mpi_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lattice::comm {

namespace {

// MPI counts are ints; a larger buffer must be split by the caller (buckets are far smaller).
int mpi_count(size_t floats) {
  if (floats > size_t(INT_MAX))
    throw std::length_error("MPI call of " + std::to_string(floats) + " floats exceeds INT_MAX elements");
  return int(floats);
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// A point-to-point send or receive in flight.
class MpiRequest final : public PendingOp {
 public:
  ~MpiRequest() override { wait(); }
  MPI_Request* request() { return &request_; }
  void wait() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    int done = 1;
    if (request_ != MPI_REQUEST_NULL) MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    return done != 0;
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// A completed operation: the collectives below run eagerly (see do_all_reduce_async).
class Done final : public PendingOp {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// Tag of the ring collectives' messages; the pipeline's sends use small tags (engine/executor.cpp).
constexpr int kRingTag = 0x7a11;

// Where each rank's chunk starts; MPI displacements are ints too, so the chunks must start below INT_MAX.
std::vector<int> displacements_of(std::span<const int> counts) {
  std::vector<int> displs(counts.size(), 0);
  size_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    displs[r] = mpi_count(at);
    at += size_t(counts[r]);
  }
  mpi_count(at);
  return displs;
}

}  // namespace

// Ring reduce-scatter (docs/design.md §5): p−1 rounds; in round k a rank sends its running sum of
// chunk (r−k−1) mod p to its right neighbour and adds what its left neighbour sends into chunk
// (r−k−2) mod p, so after the last round it holds the whole sum of its own chunk r. Measured against
// MPI_Reduce_scatter_block and MPI_Ireduce_scatter by bench/bench_collectives.cpp (README, Speed).
void MpiCommunicator::ring_reduce_scatter(std::span<const float> input, std::span<float> output,
                                          std::span<const int> counts) {
  const int p = size_, r = rank_;
  if (p == 1) {
    std::copy(input.begin(), input.begin() + long(output.size()), output.begin());
    return;
  }
  const std::vector<int> displs = displacements_of(counts);
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  int largest = 0;
  for (int c : counts) largest = std::max(largest, c);
  // Scratch of two chunks, kept for the next call (MemoryCategory::communication).
  float* incoming = ring_incoming_.ensure(largest);
  float* sum = p > 2 ? ring_sum_.ensure(largest) : nullptr;
  for (int k = 0; k < p - 1; ++k) {
    // Round 0 sends this rank's own part; later rounds the sum that arrived the round before.
    const int send_chunk = (r - k - 1 + 2 * p) % p, recv_chunk = (r - k - 2 + 2 * p) % p;
    const float* sending = k == 0 ? input.data() + displs[size_t(send_chunk)] : sum;
    MPI_Sendrecv(sending, counts[size_t(send_chunk)], MPI_FLOAT, right, kRingTag, incoming,
                 counts[size_t(recv_chunk)], MPI_FLOAT, left, kRingTag, comm_, MPI_STATUS_IGNORE);
    const float* mine = input.data() + displs[size_t(recv_chunk)];
    float* dst = k == p - 2 ? output.data() : sum;
    const int64_t n = counts[size_t(recv_chunk)];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = mine[i] + incoming[i];
  }
}

// Ring all-gather: p−1 rounds; in round k a rank passes chunk (r−k) mod p to its right neighbour and
// receives chunk (r−k−1) mod p from its left one, straight into place.
void MpiCommunicator::ring_all_gather(std::span<const float> input, std::span<float> output,
                                      std::span<const int> counts) {
  const int p = size_, r = rank_;
  const std::vector<int> displs = displacements_of(counts);
  float* own = output.data() + displs[size_t(r)];
  if (input.data() != own) std::copy(input.begin(), input.end(), own);
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  for (int k = 0; k < p - 1; ++k) {
    const int send_chunk = (r - k + 2 * p) % p, recv_chunk = (r - k - 1 + 2 * p) % p;
    MPI_Sendrecv(output.data() + displs[size_t(send_chunk)], counts[size_t(send_chunk)], MPI_FLOAT, right,
                 kRingTag, output.data() + displs[size_t(recv_chunk)], counts[size_t(recv_chunk)], MPI_FLOAT,
                 left, kRingTag, comm_, MPI_STATUS_IGNORE);
  }
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, GroupKind kind, TrafficLedger* ledger)
    : Communicator(kind, ledger), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::do_all_reduce(std::span<float> data, ReduceOp op) {
  MPI_Allreduce(MPI_IN_PLACE, data.data(), mpi_count(data.size()), MPI_FLOAT, mpi_op(op), comm_);
}

void MpiCommunicator::do_reduce_scatter(std::span<const float> input, std::span<float> output) {
  ring_reduce_scatter(input, output, std::vector<int>(size_t(size_), mpi_count(output.size())));
}

void MpiCommunicator::do_all_gather(std::span<const float> input, std::span<float> output) {
  const int n = mpi_count(input.size());
  MPI_Allgather(input.data(), n, MPI_FLOAT, output.data(), n, MPI_FLOAT, comm_);
}

void MpiCommunicator::do_broadcast(std::span<float> data, int root) {
  MPI_Bcast(data.data(), mpi_count(data.size()), MPI_FLOAT, root, comm_);
}

void MpiCommunicator::do_all_to_all(std::span<const float> input, std::span<float> output) {
  const int chunk = mpi_count(input.size() / size_t(size_));
  MPI_Alltoall(input.data(), chunk, MPI_FLOAT, output.data(), chunk, MPI_FLOAT, comm_);
}

void MpiCommunicator::do_all_to_all_v(std::span<const float> input, std::span<const int> send_counts,
                                      std::span<float> output, std::span<const int> recv_counts) {
  const std::vector<int> sdispls = displacements_of(send_counts), rdispls = displacements_of(recv_counts);
  MPI_Alltoallv(input.data(), send_counts.data(), sdispls.data(), MPI_FLOAT, output.data(), recv_counts.data(),
                rdispls.data(), MPI_FLOAT, comm_);
}

void MpiCommunicator::do_all_to_all_counts(std::span<const int> send, std::span<int> recv) {
  MPI_Alltoall(send.data(), 1, MPI_INT, recv.data(), 1, MPI_INT, comm_);
}

void MpiCommunicator::do_send(std::span<const float> data, int dest, int tag) {
  MPI_Send(data.data(), mpi_count(data.size()), MPI_FLOAT, dest, tag, comm_);
}

void MpiCommunicator::do_recv(std::span<float> data, int source, int tag) {
  MPI_Recv(data.data(), mpi_count(data.size()), MPI_FLOAT, source, tag, comm_, MPI_STATUS_IGNORE);
}

// A pipeline rank waiting for its peer (the bubble) polls, and past a short spin sleeps between polls:
// MPI_Probe busy-waits, so under `mpirun -np N` on fewer cores than N·threads an idle stage kept the
// cores its busy neighbours needed, and a step ran at the all-ranks-busy share or at the idle ranks'
// gift by chance (4 ranks on 2 cores: 0.22 s or 0.31 s a step). The sleep costs at most ~0.1 ms a wait
// on a dedicated core, against waits of milliseconds (docs/design.md §6).
void MpiCommunicator::do_probe(int source, int tag) {
  using clock = std::chrono::steady_clock;
  const clock::time_point start = clock::now();
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    int arrived = 0;
    MPI_Iprobe(source, tag, comm_, &arrived, MPI_STATUS_IGNORE);
    if (arrived) return;
    if (clock::now() - start < std::chrono::microseconds(100)) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100));
  }
}

void MpiCommunicator::do_barrier() { MPI_Barrier(comm_); }

// The collectives below run at issue and return a completed operation. OpenMPI 4.1 advances a
// non-blocking collective only inside MPI calls, so one started during backward did its work at the
// final wait, and its schedules ran 10-20x slower than the blocking calls (bench/bench_collectives.cpp):
// DP 2 lost 41% of the machine to it. Ranks reach these calls in the same order, so running them
// eagerly costs the blocking call's time and cannot deadlock.
std::unique_ptr<PendingOp> MpiCommunicator::do_all_reduce_async(std::span<float> data, ReduceOp op) {
  do_all_reduce(data, op);
  return std::make_unique<Done>();
}

std::unique_ptr<PendingOp> MpiCommunicator::do_reduce_scatter_v_async(std::span<const float> input,
                                                                       std::span<float> output,
                                                                       std::span<const int> counts) {
  mpi_count(input.size());
  ring_reduce_scatter(input, output, counts);
  return std::make_unique<Done>();
}

std::unique_ptr<PendingOp> MpiCommunicator::do_all_gather_v_async(std::span<const float> input,
                                                                   std::span<float> output,
                                                                   std::span<const int> counts) {
  mpi_count(output.size());
  ring_all_gather(input, output, counts);
  return std::make_unique<Done>();
}

std::unique_ptr<PendingOp> MpiCommunicator::do_send_async(std::span<const float> data, int dest, int tag) {
  auto pending = std::make_unique<MpiRequest>();
  MPI_Isend(data.data(), mpi_count(data.size()), MPI_FLOAT, dest, tag, comm_, pending->request());
  return pending;
}

std::unique_ptr<PendingOp> MpiCommunicator::do_recv_async(std::span<float> data, int source, int tag) {
  auto pending = std::make_unique<MpiRequest>();
  MPI_Irecv(data.data(), mpi_count(data.size()), MPI_FLOAT, source, tag, comm_, pending->request());
  return pending;
}

}  // namespace lattice::comm
