// The tracking allocator's categories (docs/design.md §4, "Every byte a rank holds"): each category
// counts its own live bytes and run-long peak, the process-wide totals count all of them at one
// instant, reserved bytes count what requests used of the blocks from the system, and the
// vector allocator and the grow-only scratch array land in the category they name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tensor/device_memory.hpp"
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

// A GPU's blocks are not the process's RAM: they count in the reserved bytes but not in those the
// summary reconciles with the peak RSS (where they made "not accounted" negative by the device's
// gigabytes). A memory whose pages are the process's (the host's, the guarded arena's) counts in both.
namespace {
void* fake_allocate(size_t bytes) { return std::aligned_alloc(64, bytes); }
void fake_release(void* p) { std::free(p); }
void fake_fill_zero(void* p, size_t n) { std::memset(p, 0, n); }
void fake_copy(void* d, const void* s, size_t n) { std::memcpy(d, s, n); }
void fake_to_bf16(const float*, uint16_t*, int64_t) {}
void fake_from_bf16(const uint16_t*, float*, int64_t) {}
DeviceMemory fake_memory(bool in_ram) {
  return {"fake",    false,          in_ram,         fake_allocate, fake_release, fake_fill_zero, fake_copy,
          fake_copy, fake_copy,      fake_to_bf16,   fake_from_bf16, nullptr,     nullptr,        nullptr};
}
}  // namespace

TEST(MemoryTracker, RamReservedLeavesOutAGpusBlocks) {
  const size_t odd = (3 << 20) + 777;  // a size class of its own here: a new block, its bytes all new
  for (bool in_ram : {false, true}) {
    static DeviceMemory memories[2] = {fake_memory(false), fake_memory(true)};
    set_device_memory(memories[in_ram]);
    const int64_t r0 = MemoryTracker::reserved_bytes(), ram0 = MemoryTracker::ram_reserved_bytes();
    {
      TrackedBuffer device(odd, kNoLayer, "device", MemoryTracker::activations());  // a device category
      EXPECT_EQ(MemoryTracker::reserved_bytes() - r0, int64_t(odd));
      EXPECT_EQ(MemoryTracker::ram_reserved_bytes() - ram0, in_ram ? int64_t(odd) : 0) << "in_ram " << in_ram;
      TrackedBuffer host(odd + 64, kNoLayer, "host", MemoryTracker::of(MemoryCategory::data));  // the host's
      EXPECT_EQ(MemoryTracker::ram_reserved_bytes() - ram0, (in_ram ? int64_t(odd) : 0) + int64_t(odd + 64));
      EXPECT_GE(MemoryTracker::ram_reserved_peak_bytes(), MemoryTracker::ram_reserved_bytes());
    }
    set_device_memory(host_memory());  // the cached device block goes back, its bytes with it
    EXPECT_EQ(MemoryTracker::reserved_bytes() - r0, int64_t(odd + 64));  // the host block stays cached
    EXPECT_EQ(MemoryTracker::ram_reserved_bytes() - ram0, int64_t(odd + 64));
    MemoryTracker::of(MemoryCategory::data).release_cache();
  }
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
