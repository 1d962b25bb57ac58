#include "comm/mpi_communicator.hpp"

#include <climits>
#include <stdexcept>
#include <string>
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

class MpiRequest final : public PendingOp {
 public:
  MpiRequest() = default;
  // Non-blocking collectives read their count and displacement arrays until completion.
  MpiRequest(std::span<const int> counts) : counts_(counts.begin(), counts.end()), displs_(counts.size(), 0) {
    for (size_t r = 1; r < counts_.size(); ++r) displs_[r] = displs_[r - 1] + counts_[r - 1];
  }
  const int* counts() const { return counts_.data(); }
  const int* displs() const { return displs_.data(); }
  ~MpiRequest() override { wait(); }
  MPI_Request* request() { return &request_; }
  void wait() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<int> counts_, displs_;
};

}  // namespace

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
  MPI_Reduce_scatter_block(input.data(), output.data(), mpi_count(output.size()), MPI_FLOAT, MPI_SUM, comm_);
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
  // MPI displacements are ints too: the chunks must start below INT_MAX.
  auto displacements = [](std::span<const int> counts) {
    std::vector<int> displs(counts.size(), 0);
    size_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      displs[r] = mpi_count(at);
      at += size_t(counts[r]);
    }
    mpi_count(at);
    return displs;
  };
  const std::vector<int> sdispls = displacements(send_counts), rdispls = displacements(recv_counts);
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

void MpiCommunicator::do_barrier() { MPI_Barrier(comm_); }

std::unique_ptr<PendingOp> MpiCommunicator::do_all_reduce_async(std::span<float> data, ReduceOp op) {
  auto pending = std::make_unique<MpiRequest>();
  MPI_Iallreduce(MPI_IN_PLACE, data.data(), mpi_count(data.size()), MPI_FLOAT, mpi_op(op), comm_,
                 pending->request());
  return pending;
}

std::unique_ptr<PendingOp> MpiCommunicator::do_reduce_scatter_v_async(std::span<const float> input,
                                                                       std::span<float> output,
                                                                       std::span<const int> counts) {
  auto pending = std::make_unique<MpiRequest>(counts);
  mpi_count(input.size());
  MPI_Ireduce_scatter(input.data(), output.data(), pending->counts(), MPI_FLOAT, MPI_SUM, comm_,
                      pending->request());
  return pending;
}

std::unique_ptr<PendingOp> MpiCommunicator::do_all_gather_v_async(std::span<const float> input,
                                                                   std::span<float> output,
                                                                   std::span<const int> counts) {
  auto pending = std::make_unique<MpiRequest>(counts);
  mpi_count(output.size());
  const bool in_place = input.data() == output.data() + pending->displs()[rank_];
  MPI_Iallgatherv(in_place ? MPI_IN_PLACE : input.data(), int(input.size()), MPI_FLOAT, output.data(),
                  pending->counts(), pending->displs(), MPI_FLOAT, comm_, pending->request());
  return pending;
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
