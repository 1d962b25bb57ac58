// The guarded device (backend/guarded_device.hpp), the CPU's stand-in for a GPU's memory rules: host
// code that touches its memory dies, a device operation given host memory dies naming itself, and
// what goes through the seam (uploads, downloads, operations on device memory) works. Also: a
// DeviceVector grows exactly as the tracked std::vector it replaced, so the memory figures hold.
#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "backend/device_ops.hpp"
#include "comm/silent_communicator.hpp"
#include "tensor/bf16.hpp"
#include "tensor/device_memory.hpp"
#include "tensor/memory_tracker.hpp"

using namespace lattice;

namespace {
// The run's device for one test, back to the CPU after (the tests share one process).
struct OnDevice {
  explicit OnDevice(Device d) { select_device(d); }
  ~OnDevice() { select_device(Device::cpu); }
};
}  // namespace

TEST(GuardedDevice, HostTouchDiesSeamCopiesWork) {
  OnDevice guarded(Device::cpu_guarded);
  EXPECT_FALSE(device_memory().host_addressable);
  TrackedArray<float> a(1024, "params"), b(1024, "params");  // model states: device memory
  std::vector<float> host(1024, 1.5f), back(1024, 0.0f);
  dev::upload(a.data(), host.data(), 1024);
  dev::upload(b.data(), host.data(), 1024);
  dev::residual_add(a.data(), b.data(), 1024);  // an operation on device memory runs
  dev::download(back.data(), a.data(), 1024);
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[1023], 3.0f);
  volatile float* raw = a.data();
  EXPECT_DEATH(raw[3] = 2.0f, "");  // a host write
  EXPECT_DEATH((void)raw[5], "");   // a host read
  EXPECT_DEATH(dev::residual_add(a.data(), host.data(), 1024), "residual_add was given host memory");
  // Zeroed arrays are zeroed on the device.
  TrackedArray<float> z(16, "grads");
  std::vector<float> zs(16, 7.0f);
  dev::download(zs.data(), z.data(), 16);
  EXPECT_EQ(zs, std::vector<float>(16, 0.0f));
  // Host categories stay host memory on any device.
  TrackedArray<float> io(8, "checkpoint", MemoryCategory::checkpoint_io);
  io[7] = 1.0f;
  EXPECT_EQ(io[7], 1.0f);
}

// The global norm's one batched call names its runs in a host array: the guard looks inside it, so a
// host run among device ones still dies, and device runs give each run's own sum.
TEST(GuardedDevice, BatchedGradSumsCheckEveryRun) {
  OnDevice guarded(Device::cpu_guarded);
  TrackedArray<float> a(300, "grads"), b(70000, "grads");  // b: past the sum's one-thread size
  std::vector<float> ha(300), hb(70000);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = float(i % 7) - 3.0f;
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = float(i % 5) * 0.5f;
  dev::upload(a.data(), ha.data(), 300);
  dev::upload(b.data(), hb.data(), 70000);
  const GradPiece runs[2] = {{a.data(), 300}, {b.data(), 70000}};
  double sums[2] = {-1.0, -1.0};
  dev::grad_sums_squares({runs, sums, 2});
  EXPECT_EQ(sums[0], grad_sum_squares(ha.data(), 300));  // the CPU kernel on the same values, bit for bit
  EXPECT_EQ(sums[1], grad_sum_squares(hb.data(), 70000));
  const GradPiece mixed[2] = {{a.data(), 300}, {hb.data(), 70000}};
  EXPECT_DEATH(dev::grad_sums_squares({mixed, sums, 2}), "grad_sums_squares was given host memory");
}

// The fused attention takes Q, K, V as kept (bf16 bits here) with the room to widen them: the guard
// looks at all six pointers, each operand is widened into its own room, and the call gives the bits
// of the fp32 call on a copy widened apart from it.
TEST(GuardedDevice, FlashOperandsCheckEveryPointer) {
  // The kernel runs OpenMP threads: a forked child that did not die would hang on their pool, so
  // the death checks re-run the test binary instead of forking it.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  OnDevice guarded(Device::cpu_guarded);
  const FlashShape x{1, 2, 70, 16, /*bf16_operands=*/true};
  const int64_t n = x.b * x.a * x.s * x.dh, rows = x.b * x.a * x.s;
  std::vector<uint16_t> h16(size_t(3 * n));
  for (size_t i = 0; i < h16.size(); ++i) h16[i] = to_bf16(float(int(i * 37 % 23) - 11) * 0.0625f);
  TrackedArray<uint16_t> bits(3 * n, "qkv16");
  TrackedArray<float> wide(3 * n, "qkv32"), out(n, "out"), lse(rows, "lse"), out32(n, "out"), lse32(rows, "lse");
  dev::upload(bits.data(), h16.data(), 3 * n);
  const uint16_t* q = bits.data();
  FlashOperands in{q, q + n, q + 2 * n, true, wide.data(), wide.data() + n, wide.data() + 2 * n};
  dev::flash_attention_forward(out.data(), lse.data(), in, x, AttentionDropout{});
  // The room holds Q, K, V widened in place, each in its own third...
  std::vector<float> h32(h16.size()), room(h16.size());
  for (size_t i = 0; i < h16.size(); ++i) h32[i] = from_bf16(h16[i]);
  dev::download(room.data(), wide.data(), 3 * n);
  EXPECT_EQ(0, std::memcmp(room.data(), h32.data(), room.size() * 4));
  // ...and the call gives the bits of the fp32 call on a copy widened on the host.
  TrackedArray<float> ref(3 * n, "qkv32");
  dev::upload(ref.data(), h32.data(), 3 * n);
  FlashOperands f32{ref.data(), ref.data() + n, ref.data() + 2 * n, false};
  dev::flash_attention_forward(out32.data(), lse32.data(), f32, x, AttentionDropout{});
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  dev::download(a.data(), out.data(), n);
  dev::download(b.data(), out32.data(), n);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  FlashOperands no_room = in;
  no_room.v32 = nullptr;  // bf16 operands and nowhere to widen one: refused, not a null write
  EXPECT_THROW(dev::flash_attention_forward(out.data(), lse.data(), no_room, x, AttentionDropout{}),
               std::invalid_argument);
  std::vector<float> host_room(static_cast<size_t>(n));
  FlashOperands bad = in;
  bad.k32 = host_room.data();
  EXPECT_DEATH(dev::flash_attention_forward(out.data(), lse.data(), bad, x, AttentionDropout{}),
               "flash_attention_forward was given host memory");
  bad = in;
  bad.v = h16.data();
  EXPECT_DEATH(dev::flash_attention_forward(out.data(), lse.data(), bad, x, AttentionDropout{}),
               "flash_attention_forward was given host memory");
}

// Q, K, V in the QKV rows the model keeps under the fused attention (FlashOperands::qkv_rows): the
// forward and backward give the bits of the same call on the heads split from them.
TEST(GuardedDevice, FlashOperandsFromTheQkvRowsAreTheSplitHeads) {
  OnDevice guarded(Device::cpu_guarded);
  const FlashShape x{2, 3, 70, 16, /*bf16_operands=*/true};
  const HeadShape hs = heads_of(x);
  const int64_t n = x.b * x.a * x.s * x.dh, rows = x.b * x.a * x.s, hl = x.a * x.dh;
  std::vector<uint16_t> h16(size_t(3 * n));
  for (size_t i = 0; i < h16.size(); ++i) h16[i] = to_bf16(float(int(i * 37 % 23) - 11) * 0.0625f);
  std::vector<uint16_t> hq(static_cast<size_t>(n)), hk(static_cast<size_t>(n)), hv(static_cast<size_t>(n));
  split_heads16(hq.data(), hk.data(), hv.data(), h16.data(), hs);
  std::vector<uint16_t> heads16(hq);
  heads16.insert(heads16.end(), hk.begin(), hk.end());
  heads16.insert(heads16.end(), hv.begin(), hv.end());
  TrackedArray<uint16_t> rows16(3 * n, "qkv16"), split16(3 * n, "q16");
  dev::upload(rows16.data(), h16.data(), 3 * n);
  dev::upload(split16.data(), heads16.data(), 3 * n);
  TrackedArray<float> wide(3 * n, "qkv32");
  const uint16_t *r = rows16.data(), *h = split16.data();
  FlashOperands from_rows{r, r + hl, r + 2 * hl, true, wide.data(), wide.data() + n, wide.data() + 2 * n, true};
  FlashOperands from_heads{h, h + n, h + 2 * n, true, wide.data(), wide.data() + n, wide.data() + 2 * n};
  std::vector<float> dout(static_cast<size_t>(n));
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = float(int(i * 13 % 17) - 8) * 0.125f;
  TrackedArray<float> d_dout(n, "dout");
  dev::upload(d_dout.data(), dout.data(), n);
  std::vector<std::vector<float>> got;
  for (const FlashOperands& in : {from_rows, from_heads}) {
    TrackedArray<float> out(n, "out"), lse(rows, "lse"), dq(n, "dq"), dk(n, "dk"), dv(n, "dv");
    dev::flash_attention_forward(out.data(), lse.data(), in, x, AttentionDropout{});
    dev::flash_attention_backward(dq.data(), dk.data(), dv.data(), d_dout.data(), in, out.data(), lse.data(), x,
                                  AttentionDropout{});
    std::vector<float> all(static_cast<size_t>(4 * n));
    dev::download(all.data(), out.data(), n);
    dev::download(all.data() + n, dq.data(), n);
    dev::download(all.data() + 2 * n, dk.data(), n);
    dev::download(all.data() + 3 * n, dv.data(), n);
    got.push_back(all);
  }
  EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4));
}

TEST(GuardedDevice, DeviceVectorGrowsAsTrackedVector) {
  MemoryTracker& ws = MemoryTracker::of(MemoryCategory::workspaces);
  for (Device d : {Device::cpu, Device::cpu_guarded}) {
    OnDevice on(d);
    for (const std::vector<size_t>& sizes : {std::vector<size_t>{100, 150, 90, 400}, {1, 2, 3, 1000, 999}}) {
      const int64_t base = ws.live_bytes();
      int64_t grown_std = 0, grown_dev = 0;
      {
        tracked_vector<float, MemoryCategory::workspaces> v;
        for (size_t n : sizes) v.resize(n);
        grown_std = ws.live_bytes() - base;
      }
      {
        DeviceVector<float, MemoryCategory::workspaces> v;
        std::vector<float> host;
        for (size_t n : sizes) {
          v.resize(n);
          host.resize(n);
          for (size_t i = 0; i < n; ++i) host[i] = float(i);  // keep data that must survive the next growth
          dev::upload(v.data(), host.data(), int64_t(n));
        }
        grown_dev = ws.live_bytes() - base;
        std::vector<float> back(v.size());
        dev::download(back.data(), v.data(), int64_t(v.size()));
        EXPECT_EQ(back, host);
      }
      EXPECT_EQ(grown_dev, grown_std) << device_name(d);
    }
  }
}

// A group that moves nothing (lattice bench --tp-share's silent TP group) leaves device spans where they
// are: staging them through the host would put copies no run makes into the times it measures (on the
// H200 they were most of Table 4's layer time). A communicator that moves data stages them: the host
// copy is counted under communication (comm/device_staging.hpp).
TEST(GuardedDevice, SilentGroupStagesNothing) {
  OnDevice guarded(Device::cpu_guarded);
  MemoryTracker& comm_bytes = MemoryTracker::of(MemoryCategory::communication);
  TrackedArray<float> x(1 << 20, "activations", MemoryCategory::activations);  // device memory
  comm::SilentCommunicator silent(8, 0);
  comm_bytes.reset_peak();
  const int64_t base = comm_bytes.peak_bytes();
  silent.all_reduce(std::span<float>(x.data(), x.size()));
  TrackedArray<float> gathered(8 << 20, "activations", MemoryCategory::activations);
  silent.all_gather(std::span<const float>(x.data(), x.size()), std::span<float>(gathered.data(), gathered.size()));
  EXPECT_EQ(comm_bytes.peak_bytes(), base);
}
