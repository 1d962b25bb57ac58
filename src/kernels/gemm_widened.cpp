#include "kernels/gemm_widened.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include <omp.h>

#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::widened {
namespace {

constexpr int64_t kMinPartRows = 256;  // gemm.cpp's shortest row part: a row tile gives each thread one
constexpr int64_t kMinTile = 256;      // a column or depth tile's least (shorter ones starve oneDNN's blocking)
constexpr int64_t kPieceBytes = int64_t(16) << 20;  // a bf16 destination's fp32 rows, at least
constexpr int64_t kDefaultMaxBytes = int64_t(64) << 20;
std::atomic<int64_t> g_max_bytes{kDefaultMaxBytes};

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
int64_t round16(int64_t x) { return ceil_div(x, 16) * 16; }

// Elements held, in double (a planned shape past any machine must not overflow the count).
double held(const GemmShape& s, int64_t mt, int64_t nt, int64_t kt, bool out16) {
  const bool stage = out16 || nt < s.N;
  return double(mt) * double(kt) + double(kt) * double(nt) + (stage ? double(mt) * double(nt) : 0.0);
}

// Bytes a tiling moves beyond the GEMM's own: each copy of an operand's element reads 2 and writes 4
// (an operand is copied again wherever the loop comes back to a tile it let go); each depth tile after
// the first reads and writes C's fp32 tile (8 a element); a staged fp32 C is read and C read and
// written once more (12). A bf16 destination's rounding is the same in every tiling.
struct Cost {
  double bytes;
  bool n_outer;
};
Cost cost(const GemmShape& s, int64_t mt, int64_t nt, int64_t kt, bool out16) {
  const double m_tiles = double(ceil_div(s.M, mt)), n_tiles = double(ceil_div(s.N, nt));
  const double k_tiles = double(ceil_div(s.K, kt));
  const double a = double(s.M) * double(s.K), b = double(s.K) * double(s.N), c = double(s.M) * double(s.N);
  // m outer (then n, then depth): A's tile stays while only n moves if there is one depth tile; B's
  // stays across m if there is a single (n, depth) tile. n outer: the same with the roles swapped.
  const double m_outer = a * (k_tiles == 1 ? 1 : n_tiles) + b * (n_tiles * k_tiles == 1 ? 1 : m_tiles);
  const double n_outer = b * (k_tiles == 1 ? 1 : m_tiles) + a * (m_tiles * k_tiles == 1 ? 1 : n_tiles);
  const double passes = 8 * c * (k_tiles - 1) + (!out16 && nt < s.N ? 12 * c : 0.0);
  return {6 * std::min(m_outer, n_outer) + passes, n_outer < m_outer};
}

}  // namespace

Tiles tiles(const GemmShape& s, int64_t mt, int64_t nt, int64_t kt, bool out16) {
  Tiles t;
  t.mt = mt, t.nt = nt, t.kt = kt, t.stage = out16 || nt < s.N;
  t.a = mt * kt, t.b = kt * nt, t.c = t.stage ? mt * nt : 0;
  t.n_outer = cost(s, mt, nt, kt, out16).n_outer;
  return t;
}

namespace {

// A dimension's tile sizes to try: the first, then halved (to multiples of 16) down to `least`.
std::vector<int64_t> halvings(int64_t first, int64_t least) {
  std::vector<int64_t> v{first};
  for (int64_t x = round16(ceil_div(first, 2)); x >= least && x < v.back(); x = round16(ceil_div(x, 2))) v.push_back(x);
  return v;
}

// Rows [0, rows) of a block through fn(r0, r1), on `threads` threads where the block is large.
template <class Fn>
void for_rows(int64_t rows, int64_t cols, int threads, Fn fn) {
  if (threads < 2 || rows < 2 * threads || rows * cols < (int64_t(1) << 16)) return fn(int64_t(0), rows);
#pragma omp parallel num_threads(threads)
  {
    const int64_t n = omp_get_num_threads(), t = omp_get_thread_num();
    fn(rows * t / n, rows * (t + 1) / n);
  }
}

// dst[r·cols + j] = src[r·ld + j] widened: a dense fp32 block of `rows` rows from a bf16 one.
void widen(const uint16_t* src, int64_t ld, float* dst, int64_t rows, int64_t cols, int threads) {
  for_rows(rows, cols, threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) from_bf16(src + r * ld, dst + r * cols, cols);
  });
}

}  // namespace

std::optional<Tiles> plan(const GemmShape& s, bool out16, int threads) {
  if (s.batch <= 0 || s.M <= 0 || s.N <= 0 || s.K <= 0) return std::nullopt;  // empty: native's rules
  const double max_elements = double(g_max_bytes.load(std::memory_order_relaxed)) / sizeof(float);
  threads = std::max(1, threads);
  if (s.batch > 1) {  // a batch (attention's s² products) is copied whole or not at all
    const double b = double(s.batch);
    const double whole = b * double(s.M) * double(s.K) + b * double(s.K) * double(s.N) +
                         (out16 ? b * double(s.M) * double(s.N) : 0.0);
    if (whole > max_elements) return std::nullopt;
    Tiles t;
    t.mt = s.M, t.nt = s.N, t.kt = s.K, t.stage = out16;
    t.a = s.batch * s.M * s.K, t.b = s.batch * s.K * s.N, t.c = out16 ? s.batch * s.M * s.N : 0;
    return t;
  }
  // The first tiles: whole, with a bf16 destination's rows in pieces of at least kPieceBytes or one
  // part a thread (a transposed A's rows are not contiguous: held whole, as before tiles).
  const int64_t min_rows = kMinPartRows * threads;
  int64_t mt = s.M, nt = s.N, kt = s.K;
  if (out16 && !s.trans_a)
    mt = std::min(s.M, round16(std::max<int64_t>(min_rows, kPieceBytes / (int64_t(sizeof(float)) * s.N))));
  if (held(s, mt, nt, kt, out16) <= max_elements) return tiles(s, mt, nt, kt, out16);
  // Past the bound: of the tilings whose copies fit, the one that moves fewest bytes (fewer tiles on a
  // tie). Each dimension halves down to its least: up to ~30 sizes a dimension for a planned shape past
  // any machine, so each shape's answer is remembered (the planner asks for the same ones often).
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, int, double>;
  static std::map<Key, std::optional<Tiles>> known;
  static std::mutex guard;
  const Key key{s.M, s.N, s.K, s.trans_a, s.accumulate, out16, threads, max_elements};
  std::lock_guard<std::mutex> lock(guard);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  std::optional<Tiles>& best = known[key];
  double best_bytes = 0, best_count = 0;
  for (const int64_t m : halvings(mt, std::min(mt, min_rows)))
    for (const int64_t n : halvings(nt, std::min(nt, kMinTile)))
      for (const int64_t k : halvings(kt, std::min(kt, kMinTile))) {
        if (held(s, m, n, k, out16) > max_elements) continue;
        const double bytes = cost(s, m, n, k, out16).bytes;
        const double count = double(ceil_div(s.M, m)) * double(ceil_div(s.N, n)) * double(ceil_div(s.K, k));
        if (best && (bytes > best_bytes || (bytes == best_bytes && count >= best_count))) continue;
        best = tiles(s, m, n, k, out16), best_bytes = bytes, best_count = count;
      }
  return best;
}

std::vector<GemmShape> tile_gemms(const Tiles& t, const GemmShape& s) {
  std::vector<GemmShape> out;
  if (s.batch > 1) {
    GemmShape g = s;
    g.accumulate = !t.stage && s.accumulate;
    out.push_back(g);
    return out;
  }
  // Rows and columns: every tile's size with every other's (the last row tile meets each column tile).
  auto sizes = [](int64_t whole, int64_t tile) {
    std::vector<int64_t> v{std::min(whole, tile)};
    if (whole > tile && whole % tile != 0) v.push_back(whole % tile);
    return v;
  };
  // Depth: the first tile is whole-sized and takes the caller's flag; the later ones add.
  const int64_t k_tiles = ceil_div(s.K, t.kt), k_last = s.K - (k_tiles - 1) * t.kt;
  std::vector<std::pair<int64_t, bool>> depths{{std::min(s.K, t.kt), !t.stage && s.accumulate}};
  if (k_tiles > 2 || (k_tiles == 2 && k_last == t.kt)) depths.push_back({t.kt, true});
  if (k_tiles > 1 && k_last != t.kt) depths.push_back({k_last, true});
  for (const int64_t m : sizes(s.M, t.mt))
    for (const int64_t n : sizes(s.N, t.nt))
      for (const auto& [k, acc] : depths) {
        GemmShape g = s;
        g.M = m, g.N = n, g.K = k, g.accumulate = acc;
        out.push_back(g);
      }
  return out;
}

void run(const Tiles& t, const GemmShape& s, const uint16_t* a, const uint16_t* b, void* c, const float* bias,
         bool out16, int threads, const Fp32Gemm& fp32) {
  static thread_local ScratchArray<float> buffer(MemoryCategory::workspaces, "gemm_widened");
  float* const a32 = buffer.ensure(t.elements());
  float* const b32 = a32 + t.a;
  float* const c32 = b32 + t.b;
  auto* const c16 = static_cast<uint16_t*>(c);
  auto* const c_f32 = static_cast<float*>(c);
  if (s.batch > 1) {  // whole: the batch's matrices are contiguous
    widen(a, s.M * s.K, a32, s.batch, s.M * s.K, threads);
    widen(b, s.K * s.N, b32, s.batch, s.K * s.N, threads);
    GemmShape g = s;
    g.accumulate = !t.stage && s.accumulate;
    fp32(g, a32, b32, t.stage ? c32 : c_f32, bias);
    if (t.stage) to_bf16(c32, c16, s.batch * s.M * s.N);
    return;
  }
  if (!t.stage && t.nt != s.N) throw std::logic_error("widened GEMM: column tiles need a staged C");
  const int64_t m_tiles = ceil_div(s.M, t.mt), n_tiles = ceil_div(s.N, t.nt), k_tiles = ceil_div(s.K, t.kt);
  int64_t a_tile = -1, b_tile = -1;  // the tiles the copies hold now
  for (int64_t outer = 0; outer < (t.n_outer ? n_tiles : m_tiles); ++outer)
    for (int64_t inner = 0; inner < (t.n_outer ? m_tiles : n_tiles); ++inner) {
      const int64_t mi = t.n_outer ? inner : outer, ni = t.n_outer ? outer : inner;
      const int64_t i0 = mi * t.mt, n0 = ni * t.nt, m = std::min(t.mt, s.M - i0), n = std::min(t.nt, s.N - n0);
      for (int64_t ki = 0; ki < k_tiles; ++ki) {
        const int64_t k0 = ki * t.kt, k = std::min(t.kt, s.K - k0);
        if (a_tile != mi * k_tiles + ki) {  // A's tile: [m, k], or [k, m] when A is stored transposed
          a_tile = mi * k_tiles + ki;
          if (s.trans_a) widen(a + k0 * s.M + i0, s.M, a32, k, m, threads);
          else widen(a + i0 * s.K + k0, s.K, a32, m, k, threads);
        }
        if (b_tile != ki * n_tiles + ni) {  // B's tile: [k, n], or [n, k] when B is stored transposed
          b_tile = ki * n_tiles + ni;
          if (s.trans_b) widen(b + n0 * s.K + k0, s.K, b32, n, k, threads);
          else widen(b + k0 * s.N + n0, s.N, b32, k, n, threads);
        }
        GemmShape g = s;
        g.M = m, g.N = n, g.K = k;
        // Depth tiles after the first add to the first's sums; an unstaged C takes the caller's flag.
        g.accumulate = ki > 0 || (!t.stage && s.accumulate);
        fp32(g, a32, b32, t.stage ? c32 : c_f32 + i0 * s.N, ki == 0 && bias ? bias + n0 : nullptr);
      }
      if (!t.stage) continue;
      // The staged tile into C: rounded to bf16, or added to (accumulate) or written over fp32 C.
      for_rows(m, n, threads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* row = c32 + r * n;
          const int64_t at = (i0 + r) * s.N + n0;
          if (out16) {
            to_bf16(row, c16 + at, n);
          } else if (s.accumulate) {
            for (int64_t j = 0; j < n; ++j) c_f32[at + j] += row[j];
          } else {
            std::copy(row, row + n, c_f32 + at);
          }
        }
      });
    }
}

void set_max_bytes(std::optional<int64_t> bytes) {
  g_max_bytes.store(bytes ? *bytes : kDefaultMaxBytes, std::memory_order_relaxed);
}

}  // namespace lattice::widened
