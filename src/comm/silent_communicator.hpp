#pragma once
// A group of `size` ranks of which this process is `rank`, whose operations move nothing: buffers stay
// as they are, sends and receives return at once. It lets one process compute one tensor-parallel
// rank's share of a layer with the communication left out (lattice bench --layer-costs --tp-share,
// the paper's Table 4 on one GPU: docs/gpu.md), the values being a shard's partial sums, never a model's.
#include "comm/communicator.hpp"

namespace lattice::comm {

class SilentCommunicator final : public Communicator {
 public:
  SilentCommunicator(int size, int rank) : Communicator(GroupKind::tp, nullptr), size_(size), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  bool moves_data() const override { return false; }
  void do_all_reduce(std::span<float>, ReduceOp) override {}
  void do_reduce_scatter(std::span<const float>, std::span<float>) override {}
  void do_all_gather(std::span<const float>, std::span<float>) override {}
  void do_broadcast(std::span<float>, int) override {}
  void do_all_to_all(std::span<const float>, std::span<float>) override {}
  void do_all_to_all_v(std::span<const float>, std::span<const int>, std::span<float>, std::span<const int>) override {}
  void do_all_to_all_counts(std::span<const int>, std::span<int>) override {}
  void do_send(std::span<const float>, int, int) override {}
  void do_recv(std::span<float>, int, int) override {}
  void do_probe(int, int) override {}
  void do_barrier() override {}
  std::unique_ptr<PendingOp> do_all_reduce_async(std::span<float>, ReduceOp) override { return nullptr; }
  std::unique_ptr<PendingOp> do_reduce_scatter_v_async(std::span<const float>, std::span<float>,
                                                       std::span<const int>) override {
    return nullptr;
  }
  std::unique_ptr<PendingOp> do_all_gather_v_async(std::span<const float>, std::span<float>,
                                                   std::span<const int>) override {
    return nullptr;
  }
  std::unique_ptr<PendingOp> do_send_async(std::span<const float>, int, int) override { return nullptr; }
  std::unique_ptr<PendingOp> do_recv_async(std::span<float>, int, int) override { return nullptr; }

 private:
  int size_, rank_;
};

}  // namespace lattice::comm
