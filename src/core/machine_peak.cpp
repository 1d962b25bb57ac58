// The machine's peak (core/machine_peak.hpp): cores × clock × FLOP/cycle/core of the GEMM path.
#include "core/machine_peak.hpp"

#include <immintrin.h>
#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace lattice {

namespace {

// A text of /proc or /sys (or of a file LATTICE_CPUINFO / LATTICE_CPU_SYSFS name): a regular file
// only, so that a FIFO named there cannot block the run and a device cannot feed it without end; at
// most 16 MiB ("" otherwise, which reads as a machine that says nothing).
std::string read_text(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  std::ifstream in(path);
  if (!in) return "";
  std::string text;
  char piece[4096];
  while (text.size() < (size_t(16) << 20) && in.read(piece, sizeof piece).gcount() > 0)
    text.append(piece, size_t(in.gcount()));
  return text;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// One processor's block of /proc/cpuinfo ("key\t: value" lines, blocks split by a blank line).
struct CpuInfoEntry {
  int processor = -1, physical_id = -1, core_id = -1, family = -1;
  double mhz = 0;
  std::string vendor, model_name, flags;
};

int to_int(const std::string& s, int otherwise = -1) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  return end != s.c_str() && trim(end).empty() && v >= 0 && v < (1L << 30) ? int(v) : otherwise;
}

std::vector<CpuInfoEntry> parse_cpuinfo(const std::string& text) {
  std::vector<CpuInfoEntry> out;
  CpuInfoEntry e;
  bool any = false;
  std::istringstream in(text);
  std::string line;
  auto flush = [&] {
    if (any) out.push_back(e);
    e = CpuInfoEntry{}, any = false;
  };
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (trim(line).empty()) {
      flush();
      continue;
    }
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    any = true;
    if (key == "processor") e.processor = to_int(value);
    else if (key == "physical id") e.physical_id = to_int(value);
    else if (key == "core id") e.core_id = to_int(value);
    else if (key == "cpu family") e.family = to_int(value);
    else if (key == "cpu MHz") e.mhz = std::strtod(value.c_str(), nullptr);
    else if (key == "vendor_id") e.vendor = value;
    else if (key == "model name") e.model_name = value;
    else if (key == "flags" || key == "Features") e.flags = value;
  }
  flush();
  return out;
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream in(flags);
  std::string f;
  while (in >> f)
    if (f == flag) return true;
  return false;
}

std::string cpu_list_text(const std::vector<int>& cpus) {  // 0 1 2 5 -> "0-2,5"
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cpus[i]);
    if (j > i) s += '-', s += std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

// The GEMM path the dtype takes and its FLOPs a cycle a core (a multiply-add is 2 FLOPs).
struct GemmPath {
  std::string name, tag, per_cycle_text;
  double flop_per_cycle = 0;
  bool bf16_widened = false;  // bf16 operands widened to fp32 for the FMA path (bf16_gemm_widens)
};

// How many 512-bit FMA results a core retires a cycle. Not in /proc/cpuinfo: decided from what is.
// Sapphire Rapids and later (AMX) have two 512-bit FMA units in every core; AMD Zen 4 (family 25)
// runs a 512-bit FMA on its two 256-bit units (one a cycle), Zen 5 (26) on two 512-bit units;
// Skylake/Cascade Lake Xeons have two in Gold 6xxx and Platinum, one in Silver, Bronze and most
// Gold 5xxx, which the flags do not tell apart: two are assumed there, and said so.
std::pair<int, std::string> fma512_units(const CpuInfoEntry& cpu, bool amx) {
  if (cpu.vendor == "AuthenticAMD" && cpu.family == 25) return {1, "1 FMA unit: AMD Zen 4 splits a 512-bit FMA in two"};
  if (cpu.vendor == "AuthenticAMD" && cpu.family >= 26) return {2, "2 FMA units: AMD Zen 5"};
  if (amx) return {2, "2 FMA units, as in every AMX core"};
  return {2, "2 FMA units assumed; some Xeon Scalable SKUs have one"};
}

// VDPBF16PS zmm instructions a core retires a cycle, and why. AMD runs them on its FMA units (Zen 4
// one a cycle, Zen 5 two). Intel's run one every two cycles: measured by `lattice bench`'s dot-product
// loop (measure_dpbf16_flops) on an Emerald Rapids guest, 1.35 G a second a thread beside 5.5 G
// FMAs at the same clock; so 32 FLOP/cycle a core, half the FMAs' 64, and oneDNN's bf16 GEMM ran
// at 164 GFLOP/s there against its fp32 GEMM's 289. Taken for every Intel core with the instruction.
struct DotRate {
  double per_cycle;
  std::string rate, why;
};
DotRate dpbf16_rate(const CpuInfoEntry& cpu, int fma_units, const std::string& units_text) {
  if (cpu.vendor == "AuthenticAMD") return {double(fma_units), std::to_string(fma_units), units_text};
  return {0.5, "one every 2 cycles", "Intel, as measured on an Emerald Rapids"};
}

GemmPath gemm_path(const CpuInfoEntry& cpu, DType dtype, GemmIsa isa) {
  auto allows = [&](GemmIsa level) { return isa == GemmIsa::any || int(isa) >= int(level); };
  const std::string& f = cpu.flags;
  const bool amx = has_flag(f, "amx_bf16") && has_flag(f, "amx_tile");
  const auto [units, units_text] = fma512_units(cpu, amx);
  const std::string u = std::to_string(units);
  if (dtype == DType::bf16) {
    // TDPBF16PS multiplies a 16×32 bf16 tile by a 32×16 one into 16×16 fp32 sums: 16·16·32 = 8192
    // multiply-adds, 16384 FLOPs, one every 16 cycles: 1024 FLOP/cycle a core, the figure Intel gives
    // for 4th-generation Xeon Scalable ("1024 BF16 operations per cycle"; Intel's AMX overview,
    // also in Wikipedia's "Advanced Matrix Extensions").
    if (amx && allows(GemmIsa::amx))
      return {"AMX bf16", "AMX", "1024 FLOP/cycle (TMUL: 16·16·32 multiply-adds a 16-cycle TDPBF16PS)", 1024};
    // VDPBF16PS zmm: 16 fp32 lanes, each the sum of 2 bf16 products: 32 multiply-adds an instruction.
    // Where that is fewer FLOPs a cycle than the fp32 FMAs', bf16 GEMMs widen their operands to fp32
    // (exactly) and take the FMA path below (kernels/gemm.cpp).
    if (has_flag(f, "avx512_bf16") && allows(GemmIsa::avx512_core_bf16)) {
      const DotRate dot = dpbf16_rate(cpu, units, units_text);
      const double per_cycle = dot.per_cycle * 64;
      const std::string dot_text = fmt("%g", per_cycle) + " FLOP/cycle (vdpbf16ps: " + dot.rate +
                                   " × 32 bf16 multiply-adds × 2; " + dot.why + ")";
      if (!(per_cycle < units * 32 && has_flag(f, "avx512f"))) return {"AVX512_BF16", "AVX512-BF16", dot_text, per_cycle};
      GemmPath fma = gemm_path(cpu, DType::fp32, isa);
      fma.name += " (bf16 widened to fp32: vdpbf16ps gives " + fmt("%g", per_cycle) + " FLOP/cycle here, " + dot.rate +
                  "; " + dot.why + ")";
      fma.bf16_widened = true;
      return fma;
    }
  }
  const std::string converted = dtype == DType::bf16 ? " (bf16 converted to fp32)" : "";
  if (has_flag(f, "avx512f") && allows(GemmIsa::avx512_core))
    return {"AVX-512 FMA" + converted, "AVX-512",
            std::to_string(units * 32) + " FLOP/cycle (" + u + " × 16 fp32 lanes × 2; " + units_text + ")",
            double(units * 32)};
  if (has_flag(f, "avx2") && has_flag(f, "fma") && allows(GemmIsa::avx2))
    return {"AVX2 FMA" + converted, "AVX2", "32 FLOP/cycle (2 × 8 fp32 lanes × 2; 2 FMA units assumed)", 32};
  return {};
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::istringstream in(trim(text));
  std::string part;
  while (std::getline(in, part, ',')) {
    part = trim(part);
    const size_t dash = part.find('-');
    const int a = to_int(part.substr(0, dash)), b = dash == std::string::npos ? a : to_int(part.substr(dash + 1));
    if (a < 0 || b < a || b - a > 65536) return {};
    for (int c = a; c <= b; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

double model_name_ghz(const std::string& model_name) {
  const size_t at = model_name.rfind('@');
  if (at == std::string::npos) return 0;
  char* end = nullptr;
  const std::string rest = model_name.substr(at + 1);
  const double v = std::strtod(rest.c_str(), &end);
  const std::string unit = trim(end);
  if (!(v > 0) || v > 100) return 0;
  if (unit.rfind("GHz", 0) == 0) return v;
  if (unit.rfind("MHz", 0) == 0) return v / 1000;
  return 0;
}

std::string flops_text(double flops) {
  const char* units[] = {"FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s", "EFLOP/s"};
  int u = 0;
  while (flops >= 1000 && u < 6) flops /= 1000, ++u;
  return fmt("%.3g ", flops) + units[u];
}

PeakEstimate given_peak(double flops) {
  PeakEstimate p;
  p.flops = flops;
  p.source = "given (--peak-flops)";
  p.tag = "given";
  return p;
}

MachineTexts read_machine_texts(bool this_machine) {
  MachineTexts m;
  const char* info = this_machine ? nullptr : std::getenv("LATTICE_CPUINFO");
  const char* sys = this_machine ? nullptr : std::getenv("LATTICE_CPU_SYSFS");
  m.cpuinfo = read_text(info && *info ? info : "/proc/cpuinfo");
  const std::string root = sys && *sys ? sys : "/sys/devices/system/cpu";
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) m.allowed.push_back(c);
  std::vector<int> cpus = m.allowed;
  if (cpus.empty())
    for (const CpuInfoEntry& e : parse_cpuinfo(m.cpuinfo)) cpus.push_back(e.processor);
  for (int c : cpus) {
    const std::string dir = root + "/cpu" + std::to_string(c);
    CpuSysfs s;
    s.thread_siblings_list = trim(read_text(dir + "/topology/thread_siblings_list"));
    s.core_id = trim(read_text(dir + "/topology/core_id"));
    s.physical_package_id = trim(read_text(dir + "/topology/physical_package_id"));
    s.cpufreq_max_khz = trim(read_text(dir + "/cpufreq/cpuinfo_max_freq"));
    m.sysfs[c] = s;
  }
  return m;
}

namespace {
// The CPU that stands for all (its flags, vendor and clock): the lowest-numbered one this process
// may run on, or cpuinfo's first where that one is not listed. `entries` is not empty.
const CpuInfoEntry& first_allowed_cpu(const MachineTexts& machine, const std::vector<CpuInfoEntry>& entries) {
  int first = entries.front().processor;
  for (const CpuInfoEntry& e : entries) first = std::min(first, e.processor);
  if (!machine.allowed.empty()) first = *std::min_element(machine.allowed.begin(), machine.allowed.end());
  for (const CpuInfoEntry& e : entries)
    if (e.processor == first) return e;
  return entries.front();
}
}  // namespace

PeakEstimate theoretical_peak(const MachineTexts& machine, DType dtype, int threads, GemmIsa isa) {
  PeakEstimate p;
  const std::vector<CpuInfoEntry> entries = parse_cpuinfo(machine.cpuinfo);
  if (entries.empty()) {
    p.why_unknown = "no /proc/cpuinfo to read";
    return p;
  }
  std::map<int, const CpuInfoEntry*> by_processor;
  for (const CpuInfoEntry& e : entries) by_processor[e.processor] = &e;
  std::vector<int> cpus = machine.allowed;
  if (cpus.empty())
    for (const CpuInfoEntry& e : entries) cpus.push_back(e.processor);
  std::sort(cpus.begin(), cpus.end());

  // Physical cores: a CPU's hyperthread siblings share one key. sysfs's thread_siblings_list first,
  // then its package and core ids, then cpuinfo's; a CPU with none counts as a core of its own.
  std::set<std::string> cores;
  bool topology_missing = false;
  for (int c : cpus) {
    const auto s = machine.sysfs.find(c);
    const auto e = by_processor.find(c);
    if (s != machine.sysfs.end() && !parse_cpu_list(s->second.thread_siblings_list).empty())
      cores.insert("siblings " + cpu_list_text(parse_cpu_list(s->second.thread_siblings_list)));
    else if (s != machine.sysfs.end() && !s->second.core_id.empty() && !s->second.physical_package_id.empty())
      cores.insert("core " + s->second.physical_package_id + "/" + s->second.core_id);
    else if (e != by_processor.end() && e->second->core_id >= 0 && e->second->physical_id >= 0)
      cores.insert("core " + std::to_string(e->second->physical_id) + "/" + std::to_string(e->second->core_id));
    else
      cores.insert("cpu " + std::to_string(c)), topology_missing = true;
  }
  const int physical = int(cores.size());
  p.cores = threads > 0 ? std::min(threads, physical) : physical;
  std::string cores_text = std::to_string(p.cores) + (p.cores == 1 ? " core" : " cores");
  std::vector<std::string> notes;
  if (p.cores < physical)
    notes.push_back(std::to_string(threads) + " thread(s) on " + std::to_string(physical) + " physical cores");
  if (int(cpus.size()) > physical && !topology_missing)
    notes.push_back("CPUs " + cpu_list_text(cpus) + ", hyperthread siblings counted once");
  if (topology_missing) notes.push_back("no topology in sysfs or cpuinfo: each CPU counted as a core");
  for (size_t i = 0; i < notes.size(); ++i)
    cores_text += (i ? "; " : " (") + notes[i] + (i + 1 == notes.size() ? ")" : "");

  // The first CPU this process may run on stands for all: its flags, vendor and clock.
  const int first = cpus.front();
  const CpuInfoEntry& cpu = first_allowed_cpu(machine, entries);
  const GemmPath path = gemm_path(cpu, dtype, isa);
  p.bf16_widened = path.bf16_widened;
  if (path.flop_per_cycle <= 0) {
    p.why_unknown = "no GEMM path known for these CPU flags (AMX, AVX-512 or AVX2 FMA)";
    return p;
  }
  std::string clock_source;
  const auto s = machine.sysfs.find(first);
  const double khz = s == machine.sysfs.end() ? 0 : std::strtod(s->second.cpufreq_max_khz.c_str(), nullptr);
  if (khz > 0) {
    p.ghz = khz / 1e6, clock_source = "cpufreq max";
  } else if (model_name_ghz(cpu.model_name) > 0) {
    p.ghz = model_name_ghz(cpu.model_name), clock_source = "the model name's nominal clock; no cpufreq";
  } else if (cpu.mhz > 0) {
    p.ghz = cpu.mhz / 1000, clock_source = "cpuinfo \"cpu MHz\": the current clock, not the max; no cpufreq";
  } else {
    p.why_unknown = "no clock: no cpufreq, no GHz in the model name, no \"cpu MHz\" in /proc/cpuinfo";
    return p;
  }
  if (machine.measured_ghz > p.ghz) {  // the cores ran faster than that clock says
    clock_source = machine.measured_clock_source + ", above the " + fmt("%.2f", p.ghz) + " GHz of " + clock_source;
    p.ghz = machine.measured_ghz;
  }
  p.flop_per_cycle = path.flop_per_cycle;
  p.flops = double(p.cores) * p.ghz * 1e9 * p.flop_per_cycle;
  p.tag = path.tag;
  p.source = path.name + ": " + cores_text + " × " + fmt("%.2f", p.ghz) + " GHz (" + clock_source + ") × " +
             path.per_cycle_text;
  return p;
}

namespace {

// One thread's twelve independent FMA chains (more than the FMA latency × units in flight), their sum
// returned so the loop is kept; the asm barrier keeps each chain in a register. Compiled for AVX-512
// whatever -march says (a build for older CPUs still builds; the caller asks the CPU first).
__attribute__((target("avx512f"))) float fma_chains(int64_t iterations) {
  __m512 v0 = _mm512_set1_ps(0.0f), v1 = _mm512_set1_ps(0.1f), v2 = _mm512_set1_ps(0.2f), v3 = _mm512_set1_ps(0.3f);
  __m512 v4 = _mm512_set1_ps(0.4f), v5 = _mm512_set1_ps(0.5f), v6 = _mm512_set1_ps(0.6f), v7 = _mm512_set1_ps(0.7f);
  __m512 v8 = _mm512_set1_ps(0.8f), v9 = _mm512_set1_ps(0.9f), v10 = _mm512_set1_ps(1.0f), v11 = _mm512_set1_ps(1.1f);
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    v0 = _mm512_fmadd_ps(v0, m, a), v1 = _mm512_fmadd_ps(v1, m, a), v2 = _mm512_fmadd_ps(v2, m, a);
    v3 = _mm512_fmadd_ps(v3, m, a), v4 = _mm512_fmadd_ps(v4, m, a), v5 = _mm512_fmadd_ps(v5, m, a);
    v6 = _mm512_fmadd_ps(v6, m, a), v7 = _mm512_fmadd_ps(v7, m, a), v8 = _mm512_fmadd_ps(v8, m, a);
    v9 = _mm512_fmadd_ps(v9, m, a), v10 = _mm512_fmadd_ps(v10, m, a), v11 = _mm512_fmadd_ps(v11, m, a);
    __asm__ volatile("" : "+v"(v0), "+v"(v1), "+v"(v2), "+v"(v3), "+v"(v4), "+v"(v5), "+v"(v6), "+v"(v7), "+v"(v8),
                     "+v"(v9), "+v"(v10), "+v"(v11));
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v0, v1), _mm512_add_ps(v2, v3)),
                           _mm512_add_ps(_mm512_add_ps(v4, v5), _mm512_add_ps(v6, v7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(v8, v9), _mm512_add_ps(v10, v11)));
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it (-Wuninitialized)
  _mm512_store_ps(lanes, s);
  float sum = 0;
  for (float x : lanes) sum += x;
  return sum;
}

}  // namespace

bool bf16_gemm_widens(const MachineTexts& machine, GemmIsa isa) {
  const std::vector<CpuInfoEntry> entries = parse_cpuinfo(machine.cpuinfo);
  return !entries.empty() && gemm_path(first_allowed_cpu(machine, entries), DType::bf16, isa).bf16_widened;
}

namespace {
// One thread's 24 independent VDPBF16PS chains (its latency × rate in flight, with room), as fma_chains.
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(int64_t iterations) {
  __m512 v[24];
  for (int j = 0; j < 24; ++j) v[j] = _mm512_set1_ps(0.01f * float(j));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, 2^-24
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < 24; ++j) v[j] = _mm512_dpbf16_ps(v[j], x, y);
    __asm__ volatile("" : "+v"(v[0]), "+v"(v[1]), "+v"(v[2]), "+v"(v[3]), "+v"(v[4]), "+v"(v[5]), "+v"(v[6]), "+v"(v[7]),
                     "+v"(v[8]), "+v"(v[9]), "+v"(v[10]), "+v"(v[11]));
    __asm__ volatile("" : "+v"(v[12]), "+v"(v[13]), "+v"(v[14]), "+v"(v[15]), "+v"(v[16]), "+v"(v[17]), "+v"(v[18]),
                     "+v"(v[19]), "+v"(v[20]), "+v"(v[21]), "+v"(v[22]), "+v"(v[23]));
  }
  __m512 s = v[0];
  for (int j = 1; j < 24; ++j) s = _mm512_add_ps(s, v[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sum = 0;
  for (float l : lanes) sum += l;
  return sum;
}
}  // namespace

namespace {
// The FLOP/s of `threads` threads each running `chains` (which does `flops_a_thread` and returns its
// sums): the best of 16 runs, so that a shared host's bursts pass.
template <class Chains>
double best_rate(int threads, double flops_a_thread, Chains chains) {
  double best = 0;
  for (int run = 0; run < 16; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += chains();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sink == 12345.0f) std::fprintf(stderr, " ");  // the sums are used
    if (seconds > 0) best = std::max(best, double(threads) * flops_a_thread / seconds);
  }
  return best;
}
}  // namespace

double measure_dpbf16_flops(int threads) {
  if (threads < 1 || !__builtin_cpu_supports("avx512bf16")) return 0;
  constexpr int64_t kIterations = 1 << 19;  // 24 instructions each: about 5 ms a run at one every 2 cycles
  return best_rate(threads, double(kIterations) * 24 * 64, [] { return dpbf16_chains(kIterations); });
}

double measure_fma_fp32_flops(int threads) {
  if (threads < 1 || !__builtin_cpu_supports("avx512f")) return 0;
  constexpr int64_t kIterations = 1 << 21;  // 12 FMAs each: about 5 ms a run at 3 GHz and 2 FMA units
  return best_rate(threads, double(kIterations) * 12 * 32, [] { return fma_chains(kIterations); });
}

double clock_from_fma(const MachineTexts& machine, int threads, double fma_flops) {
  // Cores and FLOP/cycle only: a measured clock in the texts changes neither.
  const PeakEstimate avx512 = theoretical_peak(machine, DType::fp32, threads, GemmIsa::avx512_core);
  if (!(fma_flops > 0) || avx512.cores < 1 || avx512.tag != "AVX-512") return 0;  // the loop's path, or nothing
  return fma_flops / (double(avx512.cores) * avx512.flop_per_cycle * 1e9);
}

}  // namespace lattice
