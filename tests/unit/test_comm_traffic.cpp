// Ring-algorithm byte accounting (docs/design.md §5) and the per-group ledger, without MPI.
#include <gtest/gtest.h>

#include "comm/traffic.hpp"

using namespace lattice::comm;

TEST(CommTraffic, RingFormulas) {
  const double n = 4096;
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::all_reduce, n, 4), 2.0 * 3 / 4 * n);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::reduce_scatter, n, 4), 3.0 / 4 * n);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::all_gather, n, 4), 3.0 / 4 * n);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::all_to_all, n, 4), 3.0 / 4 * n);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::send, n, 2), n);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::recv, n, 2), 0);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::all_reduce, n, 1), 0);  // a group of one sends nothing
  // Broadcast along a ring from root 2 of 4: 2 → 3 → 0 → 1, so rank 1 forwards nothing.
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::broadcast, n, 4, 2, 2), n);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::broadcast, n, 4, 0, 2), n);
  EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::broadcast, n, 4, 1, 2), 0);
}

TEST(CommTraffic, SequenceParallelMovesTheSameBytesAsAllReduce) {
  // Paper §4.3: reduce-scatter + all-gather = all-reduce.
  for (int t : {2, 3, 4, 8}) {
    const double n = 3.0 * 1024 * t;
    EXPECT_DOUBLE_EQ(ring_bytes_sent(CollectiveOp::reduce_scatter, n, t) + ring_bytes_sent(CollectiveOp::all_gather, n, t),
                     ring_bytes_sent(CollectiveOp::all_reduce, n, t));
  }
}

TEST(CommTraffic, LedgerTotalsSnapshotsAndReset) {
  TrafficLedger ledger;
  ledger.record(GroupKind::tp, CollectiveOp::all_reduce, 150, 100);
  ledger.record(GroupKind::tp, CollectiveOp::all_gather, 75, 100);
  const TrafficLedger before = ledger;
  ledger.record(GroupKind::dp, CollectiveOp::all_reduce, 100, 100);
  ledger.record(GroupKind::tp, CollectiveOp::all_reduce, 150, 100);

  EXPECT_EQ(ledger.entry(GroupKind::tp, CollectiveOp::all_reduce).calls, 2);
  EXPECT_DOUBLE_EQ(ledger.total(GroupKind::tp).sent_bytes, 375);
  EXPECT_EQ(ledger.total(GroupKind::tp).payload_bytes, 300);
  EXPECT_EQ(ledger.total(GroupKind::pp).calls, 0);

  const TrafficLedger step = ledger.since(before);
  EXPECT_DOUBLE_EQ(step.total(GroupKind::tp).sent_bytes, 150);
  EXPECT_DOUBLE_EQ(step.total(GroupKind::dp).sent_bytes, 100);
  EXPECT_EQ(step.entry(GroupKind::tp, CollectiveOp::all_gather).calls, 0);

  ledger.reset();
  EXPECT_EQ(ledger.total(GroupKind::tp).calls, 0);
  EXPECT_STREQ(to_string(GroupKind::embedding), "embedding");
  EXPECT_STREQ(ring_formula(CollectiveOp::all_reduce), "2(t-1)/t·n");
}

TEST(CommTraffic, UnevenAllToAllCountsExactlyTheChunksSentToOthers) {
  const int counts[] = {3, 0, 5, 7};
  // Rank 2 keeps its own 5 floats: 3 + 0 + 7 = 10 sent, 40 bytes.
  EXPECT_DOUBLE_EQ(all_to_all_v_bytes_sent(counts, 2, 4), 40);
  EXPECT_DOUBLE_EQ(all_to_all_v_bytes_sent(counts, 0, 4), 48);
  EXPECT_DOUBLE_EQ(all_to_all_v_bytes_sent(counts, 1, 4), 60);  // sends nothing to itself anyway
  EXPECT_DOUBLE_EQ(all_to_all_v_bytes_sent(counts, 0, 2), 24);  // element size scales the bytes
  const int alone[] = {9};
  EXPECT_DOUBLE_EQ(all_to_all_v_bytes_sent(alone, 0, 4), 0);  // a group of one sends nothing
  // Even counts: the same as the ring estimate (t-1)/t·n for all_to_all.
  const int even[] = {6, 6, 6, 6};
  EXPECT_DOUBLE_EQ(all_to_all_v_bytes_sent(even, 1, 4), ring_bytes_sent(CollectiveOp::all_to_all, 4 * 24, 4));
}

TEST(CommTraffic, ExpertGroupKinds) {
  EXPECT_EQ(kGroupKinds, int(GroupKind::cp) + 1);
  EXPECT_STREQ(to_string(GroupKind::cp), "cp");
  EXPECT_STREQ(to_string(GroupKind::ep), "ep");
  EXPECT_STREQ(to_string(GroupKind::expert_dp), "expert_dp");
  TrafficLedger ledger;
  ledger.record(GroupKind::expert_dp, CollectiveOp::all_reduce, 30, 20);
  ledger.record(GroupKind::ep, CollectiveOp::all_to_all, 40, 60);
  EXPECT_DOUBLE_EQ(ledger.total(GroupKind::ep).sent_bytes, 40);
  EXPECT_DOUBLE_EQ(ledger.total(GroupKind::expert_dp).sent_bytes, 30);
  EXPECT_EQ(ledger.total(GroupKind::dp).calls, 0);
  EXPECT_EQ(ledger.since(TrafficLedger{}).entry(GroupKind::ep, CollectiveOp::all_to_all).payload_bytes, 60);
}
