#include "kernels/gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "kernels/packed_gemm.hpp"
#include "oneapi/dnnl/dnnl.hpp"

namespace lattice {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}
dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu_engine());
  return stream;
}

struct Key {
  int64_t batch, M, N, K;
  bool ta, tb, acc, bias, bf16;
  float alpha;
  auto tie() const { return std::tie(batch, M, N, K, ta, tb, acc, bias, bf16, alpha); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Prim {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, bias;
};

// 3-D descriptors [batch, rows, cols]; a transposed operand is described by its strides.
dnnl::memory::desc operand_desc(int64_t batch, int64_t rows, int64_t cols, bool transposed, dt type) {
  if (!transposed) return dnnl::memory::desc(dims{batch, rows, cols}, type, dims{rows * cols, cols, 1});
  return dnnl::memory::desc(dims{batch, rows, cols}, type, dims{rows * cols, 1, rows});
}

Prim make_prim(const Key& k) {
  const dt in = k.bf16 ? dt::bf16 : dt::f32;
  Prim p;
  p.a = operand_desc(k.batch, k.M, k.K, k.ta, in);
  p.b = operand_desc(k.batch, k.K, k.N, k.tb, in);
  p.c = dnnl::memory::desc(dims{k.batch, k.M, k.N}, dt::f32, dims{k.M * k.N, k.N, 1});
  dnnl::primitive_attr attr;
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.acc) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  std::unique_ptr<dnnl::matmul::desc> desc;
  if (k.bias) {
    p.bias = dnnl::memory::desc(dims{1, 1, k.N}, dt::f32, dims{k.N, k.N, 1});
    desc = std::make_unique<dnnl::matmul::desc>(p.a, p.b, p.bias, p.c);
  } else {
    desc = std::make_unique<dnnl::matmul::desc>(p.a, p.b, p.c);
  }
  dnnl::matmul::primitive_desc pd(*desc, attr, cpu_engine());
  p.matmul = dnnl::matmul(pd);
  return p;
}

std::map<Key, Prim>& cache() {
  static std::map<Key, Prim> c;
  return c;
}

bool packed_kernel_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("LATTICE_GEMM");
    return !(v && std::strcmp(v, "onednn") == 0);
  }();
  return allowed;
}

}  // namespace

GemmKernel gemm_kernel_for(const GemmShape& s, DType operands, bool has_bias) {
  // Measured at every GEMM shape of a GPT-2-small step on this machine (bench/bench_gemm_candidates.cpp,
  // docs/design.md §7): where B is not transposed and the output is wide or the depth deep (≥ 2048: FC1
  // forward and weight gradient, FC2 forward, the head's input gradient) the packed kernel beats oneDNN by
  // 7–24%; on the narrow shallow ones (N = K = 768) and wherever B is transposed it loses 2–14%.
  const bool packed = operands == DType::fp32 && s.batch == 1 && !s.trans_b && (!has_bias || s.alpha == 1.0f) &&
                      std::max(s.N, s.K) >= 2048 && packed_gemm_available();
  return packed ? GemmKernel::packed : GemmKernel::onednn;
}

void gemm(const GemmShape& s, GemmOperand a, GemmOperand b, float* c, const float* bias) {
  if (a.dtype != b.dtype) throw std::logic_error("gemm: A and B must share a dtype");
  if (packed_kernel_allowed() && gemm_kernel_for(s, a.dtype, bias != nullptr) == GemmKernel::packed) {
    packed_gemm_f32(s, static_cast<const float*>(a.ptr), static_cast<const float*>(b.ptr), c, bias);
    return;
  }
  const Key key{s.batch, s.M, s.N, s.K, s.trans_a, s.trans_b, s.accumulate, bias != nullptr,
                a.dtype == DType::bf16, s.alpha};
  auto it = cache().find(key);
  if (it == cache().end()) it = cache().emplace(key, make_prim(key)).first;
  const Prim& p = it->second;
  auto& eng = cpu_engine();
  dnnl::memory am(p.a, eng, const_cast<void*>(a.ptr));
  dnnl::memory bm(p.b, eng, const_cast<void*>(b.ptr));
  dnnl::memory cm(p.c, eng, c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, eng, const_cast<float*>(bias)));
  p.matmul.execute(cpu_stream(), args);
  cpu_stream().wait();
}

int64_t gemm_cached_primitives() { return int64_t(cache().size()); }

}  // namespace lattice
