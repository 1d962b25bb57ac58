// The tracking allocator's categories (docs/design.md §4, "Every byte a rank holds"): each category
// counts its own live bytes and run-long peak, the process-wide totals count all of them at one
// instant, reserved bytes count what requests used of the blocks from the system, and the
// vector allocator and the grow-only scratch array land in the category they name.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tensor/memory_tracker.hpp"

using namespace lattice;

TEST(MemoryTracker, CategoriesCountApartAndTogether) {
  MemoryTracker& comm = MemoryTracker::of(MemoryCategory::communication);
  MemoryTracker& pipe = MemoryTracker::of(MemoryCategory::pipeline);
  const int64_t comm0 = comm.live_bytes(), pipe0 = pipe.live_bytes();
  const int64_t all0 = MemoryTracker::accounted_live_bytes();
  {
    TrackedBuffer a(1000, kNoLayer, "a", comm);
    TrackedBuffer b(3000, kNoLayer, "b", pipe);
    EXPECT_EQ(comm.live_bytes() - comm0, 1000);
    EXPECT_EQ(pipe.live_bytes() - pipe0, 3000);
    EXPECT_EQ(MemoryTracker::accounted_live_bytes() - all0, 4000);
    EXPECT_GE(MemoryTracker::accounted_peak_bytes(), MemoryTracker::accounted_live_bytes());
    EXPECT_GE(pipe.run_peak_bytes(), pipe.live_bytes());
  }
  EXPECT_EQ(comm.live_bytes(), comm0);
  EXPECT_EQ(pipe.live_bytes(), pipe0);
  EXPECT_EQ(MemoryTracker::accounted_live_bytes(), all0);
}

TEST(MemoryTracker, RunPeakSurvivesTheStepReset) {
  MemoryTracker& ws = MemoryTracker::of(MemoryCategory::workspaces);
  const int64_t big = 7 << 20;
  { TrackedBuffer x(size_t(big), kNoLayer, "x", ws); }
  ws.reset_peak();
  EXPECT_LT(ws.peak_bytes(), ws.live_bytes() + big);  // the step's window forgot it
  EXPECT_GE(ws.run_peak_bytes(), big);                // the run's peak did not
}

TEST(MemoryTracker, ReservedCountsWhatRequestsUsedOfEachBlock) {
  MemoryTracker& data = MemoryTracker::of(MemoryCategory::data);
  const int64_t r0 = MemoryTracker::reserved_bytes();
  const size_t odd = (5 << 20) + 12345;  // its size class is 5.5 MiB: the block's tail is never written
  { TrackedBuffer x(odd, kNoLayer, "x", data); }
  const int64_t r1 = MemoryTracker::reserved_bytes();
  EXPECT_EQ(r1 - r0, int64_t(odd));
  { TrackedBuffer again(odd - 100, kNoLayer, "again", data); }  // recycled, and uses less of it
  EXPECT_EQ(MemoryTracker::reserved_bytes(), r1);
  { TrackedBuffer more(odd + 1000, kNoLayer, "more", data); }  // the same block, more of it written
  EXPECT_EQ(MemoryTracker::reserved_bytes(), r1 + 1000);
  EXPECT_GE(MemoryTracker::reserved_peak_bytes(), r1 + 1000);
}

TEST(MemoryTracker, VectorsAndScratchLandInTheirCategory) {
  MemoryTracker& ckpt = MemoryTracker::of(MemoryCategory::checkpoint_io);
  const int64_t c0 = ckpt.live_bytes();
  {
    tracked_vector<float, MemoryCategory::checkpoint_io> v(1000);
    EXPECT_EQ(ckpt.live_bytes() - c0, 4000);
    v.resize(3000);
    EXPECT_EQ(ckpt.live_bytes() - c0, 12000);
    ScratchArray<double> scratch(MemoryCategory::checkpoint_io, "scratch");
    const double* first = scratch.ensure(100);
    EXPECT_EQ(ckpt.live_bytes() - c0, 12000 + 800);
    EXPECT_EQ(scratch.ensure(50), first);  // grow-only: smaller asks keep the buffer
    scratch.ensure(200);
    EXPECT_EQ(ckpt.live_bytes() - c0, 12000 + 1600);
  }
  EXPECT_EQ(ckpt.live_bytes(), c0);
}

TEST(MemoryTracker, ThreadsMayAllocateAtOnce) {
  MemoryTracker& ws = MemoryTracker::of(MemoryCategory::workspaces);
  const int64_t w0 = ws.live_bytes();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 2000; ++i) tracked_vector<float, MemoryCategory::workspaces> v(size_t(64 + i % 300));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ws.live_bytes(), w0);
}
