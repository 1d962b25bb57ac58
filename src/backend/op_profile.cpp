#include "backend/op_profile.hpp"

#include <algorithm>
#include <array>
#include <chrono>

#include "backend/device_ops.hpp"

namespace lattice {

namespace {

#define LATTICE_COUNT_OP(op) +1
constexpr int kOps = 0 LATTICE_DEVICE_OPS(LATTICE_COUNT_OP);
#undef LATTICE_COUNT_OP

struct Totals {
  std::array<const char*, kOps> names{};
  std::array<long long, kOps> calls{};
  std::array<double, kOps> seconds{};
};
Totals& totals() {
  static Totals t;
  return t;
}

DeviceOps g_inner;  // the table being profiled
bool g_enabled = false;

template <auto Member>
struct Profiled;
template <class R, class... A, R (*DeviceOps::*Member)(A...)>
struct Profiled<Member> {
  static int index;
  static R call(A... a) {
    g_inner.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    struct Stop {  // also when the operation throws
      std::chrono::steady_clock::time_point t0;
      ~Stop() {
        g_inner.synchronize();
        totals().calls[size_t(index)] += 1;
        totals().seconds[size_t(index)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    } stop{t0};
    return (g_inner.*Member)(a...);
  }
};
template <class R, class... A, R (*DeviceOps::*Member)(A...)>
int Profiled<Member>::index = 0;

}  // namespace

void enable_op_profile() {
  if (g_enabled) return;
  g_inner = device_ops();
  static DeviceOps profiled;
  profiled = g_inner;
  int i = 0;
#define LATTICE_PROFILE(op)                                                 \
  totals().names[size_t(i)] = #op, Profiled<&DeviceOps::op>::index = i++;   \
  profiled.op = &Profiled<&DeviceOps::op>::call;
  LATTICE_DEVICE_OPS(LATTICE_PROFILE)
#undef LATTICE_PROFILE
  profiled.synchronize = g_inner.synchronize;  // the profiler's own edge, not an operation to time
  replace_device_ops(profiled);
  g_enabled = true;
}

bool op_profile_enabled() { return g_enabled; }

void reset_op_profile() {
  totals().calls.fill(0);
  totals().seconds.fill(0);
}

std::vector<OpTime> op_profile() {
  std::vector<OpTime> out;
  const Totals& t = totals();
  for (int i = 0; i < kOps; ++i)
    if (t.calls[size_t(i)] > 0) out.push_back({t.names[size_t(i)], t.calls[size_t(i)], t.seconds[size_t(i)]});
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace lattice
