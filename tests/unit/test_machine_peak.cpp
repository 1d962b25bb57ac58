// The MFU's theoretical peak (core/machine_peak.hpp) over fake /proc/cpuinfo and sysfs texts:
// cores × clock × FLOP/cycle for each GEMM path, hyperthreads counted once, each clock source.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/machine_peak.hpp"

namespace lattice {
namespace {

const std::string kSprFlags = "fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8";
const std::string kIceLakeFlags = "fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni";
const std::string kCooperLakeFlags = "fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16";
const std::string kHaswellFlags = "fpu sse2 avx avx2 fma";

struct FakeCpu {
  int processor, physical_id = -1, core_id = -1;
  std::string model_name = "Intel(R) Xeon(R) Processor", mhz = "2599.998";
};

// A cpuinfo text of `cpus`, all with `flags`.
std::string cpuinfo(const std::vector<FakeCpu>& cpus, const std::string& flags,
                    const std::string& vendor = "GenuineIntel", int family = 6) {
  std::string s;
  for (const FakeCpu& c : cpus) {
    s += "processor\t: " + std::to_string(c.processor) + "\nvendor_id\t: " + vendor + "\ncpu family\t: " +
         std::to_string(family) + "\nmodel name\t: " + c.model_name + "\n";
    if (!c.mhz.empty()) s += "cpu MHz\t\t: " + c.mhz + "\n";
    if (c.physical_id >= 0) s += "physical id\t: " + std::to_string(c.physical_id) + "\n";
    if (c.core_id >= 0) s += "core id\t\t: " + std::to_string(c.core_id) + "\n";
    s += "flags\t\t: " + flags + "\n\n";
  }
  return s;
}

// 2 cores × 2 hyperthreads, Linux numbering (siblings 0,2 and 1,3), cpufreq max 3.8 GHz.
MachineTexts spr_with_hyperthreads() {
  MachineTexts m;
  m.cpuinfo = cpuinfo({{0, 0, 0}, {1, 0, 1}, {2, 0, 0}, {3, 0, 1}}, kSprFlags);
  m.allowed = {0, 1, 2, 3};
  for (int c : m.allowed)
    m.sysfs[c] = {c % 2 ? "1,3" : "0,2", std::to_string(c % 2), "0", "3800000"};
  return m;
}

TEST(MachinePeak, AmxBf16CountsHyperthreadSiblingsOnce) {
  const PeakEstimate p = theoretical_peak(spr_with_hyperthreads(), DType::bf16, 4);
  EXPECT_EQ(p.cores, 2);  // 4 CPUs, 2 physical cores
  EXPECT_DOUBLE_EQ(p.ghz, 3.8);
  EXPECT_DOUBLE_EQ(p.flop_per_cycle, 1024);
  EXPECT_DOUBLE_EQ(p.flops, 2 * 3.8e9 * 1024);
  EXPECT_EQ(p.tag, "AMX");
  EXPECT_NE(p.source.find("AMX bf16: 2 cores"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("hyperthread siblings counted once"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("3.80 GHz (cpufreq max)"), std::string::npos) << p.source;
}

TEST(MachinePeak, Fp32IsTwoAvx512FmaUnits) {
  const PeakEstimate p = theoretical_peak(spr_with_hyperthreads(), DType::fp32, 0);
  EXPECT_EQ(p.cores, 2);
  EXPECT_DOUBLE_EQ(p.flops, 2 * 3.8e9 * 64);  // 2 FMA units × 16 lanes × 2
  EXPECT_NE(p.source.find("AVX-512 FMA: "), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("as in every AMX core"), std::string::npos) << p.source;  // why 2 units
}

TEST(MachinePeak, FewerThreadsThanCoresCountTheThreads) {
  const PeakEstimate p = theoretical_peak(spr_with_hyperthreads(), DType::bf16, 1);
  EXPECT_EQ(p.cores, 1);
  EXPECT_DOUBLE_EQ(p.flops, 3.8e9 * 1024);
  EXPECT_NE(p.source.find("1 thread(s) on 2 physical cores"), std::string::npos) << p.source;
}

TEST(MachinePeak, AffinityLimitsTheCores) {
  MachineTexts m = spr_with_hyperthreads();
  m.allowed = {0, 2};  // one core's two hyperthreads
  EXPECT_EQ(theoretical_peak(m, DType::bf16, 2).cores, 1);
}

TEST(MachinePeak, OneDnnIsaCapsThePath) {
  // Capped below AMX, an Intel core's vdpbf16ps (one every 2 cycles: 32 FLOP/cycle) is slower than its
  // FMAs (64): bf16 GEMMs widen to fp32 and take the FMA path.
  const PeakEstimate p = theoretical_peak(spr_with_hyperthreads(), DType::bf16, 2, GemmIsa::avx512_core_bf16);
  EXPECT_DOUBLE_EQ(p.flop_per_cycle, 64);
  EXPECT_EQ(p.tag, "AVX-512");
  EXPECT_TRUE(p.bf16_widened);
  EXPECT_TRUE(bf16_gemm_widens(spr_with_hyperthreads(), GemmIsa::avx512_core_bf16));
  EXPECT_FALSE(bf16_gemm_widens(spr_with_hyperthreads(), GemmIsa::amx));  // AMX's 1024 runs bf16 itself
  EXPECT_FALSE(theoretical_peak(spr_with_hyperthreads(), DType::bf16, 2).bf16_widened);
  const PeakEstimate q = theoretical_peak(spr_with_hyperthreads(), DType::bf16, 2, GemmIsa::avx512_core);
  EXPECT_DOUBLE_EQ(q.flop_per_cycle, 64);
  EXPECT_NE(q.source.find("bf16 converted to fp32"), std::string::npos) << q.source;
  EXPECT_EQ(theoretical_peak(spr_with_hyperthreads(), DType::bf16, 2, GemmIsa::sse41).flops, 0);
}

TEST(MachinePeak, IntelAvx512Bf16WithoutAmxWidensToTheFmaPath) {
  MachineTexts m;
  m.cpuinfo = cpuinfo({{0, 0, 0}}, kCooperLakeFlags);
  m.allowed = {0};
  m.sysfs[0] = {"0", "0", "0", "3000000"};
  const PeakEstimate p = theoretical_peak(m, DType::bf16, 1);
  EXPECT_DOUBLE_EQ(p.flops, 3e9 * 64);  // the FMAs' 2 × 16 × 2, not vdpbf16ps's 0.5 × 32 × 2
  EXPECT_TRUE(p.bf16_widened);
  EXPECT_TRUE(bf16_gemm_widens(m, GemmIsa::any));
  EXPECT_NE(p.source.find("AVX-512 FMA (bf16 widened to fp32: vdpbf16ps gives 32 FLOP/cycle here, one every 2 cycles"),
            std::string::npos)
      << p.source;
  EXPECT_NE(p.source.find("2 FMA units assumed"), std::string::npos) << p.source;
  EXPECT_FALSE(theoretical_peak(m, DType::fp32, 1).bf16_widened);
  // Without AVX512-BF16 oneDNN converts bf16 itself: nothing for lattice to widen.
  m.cpuinfo = cpuinfo({{0, 0, 0}}, kIceLakeFlags);
  EXPECT_FALSE(bf16_gemm_widens(m, GemmIsa::any));
  EXPECT_FALSE(theoretical_peak(m, DType::bf16, 1).bf16_widened);
}

TEST(MachinePeak, NoAvx512FallsToAvx2Fma) {
  MachineTexts m;
  m.cpuinfo = cpuinfo({{0, 0, 0, "Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz"}}, kHaswellFlags);
  m.allowed = {0};
  m.sysfs[0] = {"0", "0", "0", ""};  // no cpufreq: the model name's clock
  for (DType d : {DType::fp32, DType::bf16}) {
    const PeakEstimate p = theoretical_peak(m, d, 1);
    EXPECT_DOUBLE_EQ(p.flops, 2.5e9 * 32) << to_string(d);
    EXPECT_EQ(p.tag, "AVX2");
    EXPECT_NE(p.source.find("2.50 GHz (the model name's nominal clock; no cpufreq)"), std::string::npos) << p.source;
  }
}

TEST(MachinePeak, IceLakeBf16RunsAsFp32) {
  MachineTexts m;
  m.cpuinfo = cpuinfo({{0, 0, 0, "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"}}, kIceLakeFlags);
  m.allowed = {0};
  EXPECT_DOUBLE_EQ(theoretical_peak(m, DType::bf16, 1).flop_per_cycle, 64);
}

TEST(MachinePeak, AmdZen4HalvesTheAvx512Rate) {
  MachineTexts m;
  m.cpuinfo = cpuinfo({{0, 0, 0, "AMD EPYC 9654 96-Core Processor"}}, kCooperLakeFlags, "AuthenticAMD", 25);
  m.allowed = {0};
  m.sysfs[0] = {"0", "0", "0", "3700000"};
  EXPECT_DOUBLE_EQ(theoretical_peak(m, DType::fp32, 1).flop_per_cycle, 32);
  EXPECT_DOUBLE_EQ(theoretical_peak(m, DType::bf16, 1).flop_per_cycle, 64);
}

TEST(MachinePeak, MissingCpufreqAndGhzUsesTheCurrentClockAndSaysSo) {
  MachineTexts m;  // this machine's kind: a VM whose model name has no GHz and no cpufreq
  m.cpuinfo = cpuinfo({{0, 0, 0}, {1, 0, 1}}, kSprFlags);
  m.allowed = {0, 1};
  m.sysfs[0] = {"0", "0", "0", ""};
  m.sysfs[1] = {"1", "1", "0", ""};
  const PeakEstimate p = theoretical_peak(m, DType::bf16, 2);
  EXPECT_EQ(p.cores, 2);
  EXPECT_NEAR(p.flops, 2 * 2.599998e9 * 1024, 1e3);
  EXPECT_NE(p.source.find("the current clock, not the max"), std::string::npos) << p.source;
}

TEST(MachinePeak, NoClockAtAllIsUnknown) {
  MachineTexts m;
  FakeCpu cpu{0, 0, 0};
  cpu.mhz = "";
  m.cpuinfo = cpuinfo({cpu}, kSprFlags);
  m.allowed = {0};
  const PeakEstimate p = theoretical_peak(m, DType::bf16, 1);
  EXPECT_EQ(p.flops, 0);
  EXPECT_NE(p.why_unknown.find("no clock"), std::string::npos) << p.why_unknown;
}

TEST(MachinePeak, UnknownFlagsAreUnknown) {
  MachineTexts m;
  m.cpuinfo = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n\n";
  m.allowed = {0};
  const PeakEstimate p = theoretical_peak(m, DType::fp32, 1);
  EXPECT_EQ(p.flops, 0);
  EXPECT_NE(p.why_unknown.find("no GEMM path"), std::string::npos);
  EXPECT_EQ(theoretical_peak(MachineTexts{}, DType::fp32, 1).flops, 0);  // no cpuinfo at all
}

TEST(MachinePeak, CpuinfoCoreIdsWhenSysfsIsAbsent) {
  MachineTexts m;  // 4 CPUs on 2 cores by cpuinfo's "core id"; no sysfs
  m.cpuinfo = cpuinfo({{0, 0, 0}, {1, 0, 1}, {2, 0, 0}, {3, 0, 1}}, kSprFlags);
  m.allowed = {0, 1, 2, 3};
  EXPECT_EQ(theoretical_peak(m, DType::fp32, 0).cores, 2);
}

TEST(MachinePeak, NoTopologyCountsEachCpuAndSaysSo) {
  MachineTexts m;
  m.cpuinfo = cpuinfo({{0}, {1}}, kSprFlags);  // no physical id, no core id, no sysfs
  const PeakEstimate p = theoretical_peak(m, DType::fp32, 0);  // no affinity: every processor
  EXPECT_EQ(p.cores, 2);
  EXPECT_NE(p.source.find("no topology"), std::string::npos) << p.source;
}

TEST(MachinePeak, GivenPeak) {
  const PeakEstimate p = given_peak(312e12);
  EXPECT_EQ(p.flops, 312e12);
  EXPECT_EQ(p.source, "given (--peak-flops)");
}

TEST(MachinePeak, Parsers) {
  EXPECT_EQ(parse_cpu_list("0-3,8"), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(parse_cpu_list("1,3\n"), (std::vector<int>{1, 3}));
  EXPECT_TRUE(parse_cpu_list("3-1").empty());
  EXPECT_TRUE(parse_cpu_list("x").empty());
  EXPECT_DOUBLE_EQ(model_name_ghz("Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz"), 2.5);
  EXPECT_DOUBLE_EQ(model_name_ghz("Intel(R) Xeon(R) Processor"), 0);
  EXPECT_EQ(flops_text(5.32e12), "5.32 TFLOP/s");
  EXPECT_EQ(flops_text(700e9), "700 GFLOP/s");
}

}  // namespace
}  // namespace lattice

TEST(MachinePeak, TheFmaLoopCountsWhatOneCoreCanDo) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512";
  // One thread: at most 2 FMA units × 16 fp32 lanes × 2 FLOPs a cycle, and no x86 core runs above
  // 6 GHz; a loop the compiler dropped, or FLOPs counted twice, would pass that bound.
  const double one = lattice::measure_fma_fp32_flops(1);
  EXPECT_GT(one, 0);
  EXPECT_LE(one, 64 * 6e9);
  EXPECT_EQ(lattice::measure_fma_fp32_flops(0), 0);
}

TEST(MachinePeak, TheDotProductLoopCountsWhatOneCoreCanDo) {
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "no AVX512-BF16";
  // One thread: at most 2 VDPBF16PS a cycle × 32 multiply-adds × 2 FLOPs, at most 6 GHz.
  const double one = lattice::measure_dpbf16_flops(1);
  EXPECT_GT(one, 0);
  EXPECT_LE(one, 128 * 6e9);
  EXPECT_EQ(lattice::measure_dpbf16_flops(0), 0);
}

namespace lattice {
namespace {

// A 2-vCPU AMD Zen 5 guest as this project's: no cpufreq, no GHz in the name, cpuinfo's 2.1 GHz base.
MachineTexts zen5_guest() {
  MachineTexts m;
  m.cpuinfo = cpuinfo({{0, 0, 0, "AMD EPYC", "2096.017"}, {1, 0, 1, "AMD EPYC", "2096.017"}},
                      "fpu avx2 fma avx512f avx512bw avx512_bf16", "AuthenticAMD", 26);
  m.allowed = {0, 1};
  return m;
}

TEST(MachinePeak, AmdRunsBf16DotProductsOnItsFmaUnits) {
  // Zen 5: two 512-bit units, vdpbf16ps twice the FMAs' FLOPs: bf16 GEMMs stay bf16. Zen 4: one
  // (a 512-bit instruction split in two), the same ratio.
  const PeakEstimate p = theoretical_peak(zen5_guest(), DType::bf16, 2);
  EXPECT_DOUBLE_EQ(p.flop_per_cycle, 128);
  EXPECT_EQ(p.tag, "AVX512-BF16");
  EXPECT_FALSE(p.bf16_widened);
  EXPECT_FALSE(bf16_gemm_widens(zen5_guest(), GemmIsa::any));
  MachineTexts zen4 = zen5_guest();
  zen4.cpuinfo = cpuinfo({{0, 0, 0, "AMD EPYC", "2096.017"}}, "fpu avx2 fma avx512f avx512bw avx512_bf16",
                         "AuthenticAMD", 25);
  zen4.allowed = {0};
  EXPECT_DOUBLE_EQ(theoretical_peak(zen4, DType::bf16, 1).flop_per_cycle, 64);
  EXPECT_FALSE(bf16_gemm_widens(zen4, GemmIsa::any));
}

TEST(MachinePeak, AMeasuredClockAboveCpuinfosReplacesIt) {
  MachineTexts m = zen5_guest();
  EXPECT_DOUBLE_EQ(theoretical_peak(m, DType::bf16, 2).flops, 2 * 2.096017e9 * 128);
  m.measured_ghz = 3.5, m.measured_clock_source = "the clock lattice bench's FMA loop ran at (b.json)";
  const PeakEstimate p = theoretical_peak(m, DType::bf16, 2);
  EXPECT_DOUBLE_EQ(p.flops, 2 * 3.5e9 * 128);  // cores and FLOP/cycle unchanged, the clock measured
  EXPECT_EQ(p.tag, "AVX512-BF16");
  EXPECT_NE(p.source.find("2 cores × 3.50 GHz (the clock lattice bench's FMA loop ran at (b.json), above the 2.10 GHz "
                          "of cpuinfo \"cpu MHz\""),
            std::string::npos)
      << p.source;
  m.measured_ghz = 1.5;  // slower than the texts' clock (a cpufreq maximum the cores did not hold): never lowered
  EXPECT_DOUBLE_EQ(theoretical_peak(m, DType::bf16, 2).flops, 2 * 2.096017e9 * 128);
}

TEST(MachinePeak, TheClockFromTheFmaLoopDividesByItsPath) {
  // Zen 5: 2 cores × 64 FLOP/cycle; Zen 4 runs the loop on one 512-bit unit (32); without AVX-512
  // the loop does not run, and a rate there is no clock.
  EXPECT_DOUBLE_EQ(clock_from_fma(zen5_guest(), 2, 2 * 64 * 3.5e9), 3.5);
  EXPECT_DOUBLE_EQ(clock_from_fma(zen5_guest(), 1, 64 * 3.5e9), 3.5);
  MachineTexts zen4 = zen5_guest();
  zen4.cpuinfo = cpuinfo({{0, 0, 0, "AMD EPYC", "2000"}}, "fpu avx2 fma avx512f", "AuthenticAMD", 25);
  zen4.allowed = {0};
  EXPECT_DOUBLE_EQ(clock_from_fma(zen4, 1, 32 * 3e9), 3.0);
  MachineTexts haswell = zen5_guest();
  haswell.cpuinfo = cpuinfo({{0, 0, 0}}, kHaswellFlags);
  haswell.allowed = {0};
  EXPECT_EQ(clock_from_fma(haswell, 1, 64 * 3e9), 0);
  EXPECT_EQ(clock_from_fma(zen5_guest(), 2, 0), 0);
}

}  // namespace
}  // namespace lattice
