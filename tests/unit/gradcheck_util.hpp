#pragma once
// Helpers shared by the gradient-check tests: seeded random tensors and central finite
// differences of a scalar objective, per element and along a direction.
//
// Tolerances. The forward passes run in fp32 (unit round-off u = 6e-8) and the objective is
// summed in double. A central difference with step eps has truncation error O(eps²·f''') and
// rounding error about u·|f_terms|/eps; with eps = 1e-2..1e-3 and unit-scale inputs both stay
// well under 1% of a unit-scale derivative. So an element passes when
//   |fd − analytic| <= rtol·|analytic| + atol,   rtol = 2e-2,
// with atol a small floor (a fraction of the tensor's largest derivative) for derivatives that
// are themselves near zero, where only the absolute rounding error is meaningful.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace gradcheck {

inline std::vector<float> randn(int64_t n, uint32_t seed, float std = 1.0f, float mean = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

inline double dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

inline double norm(const float* a, int64_t n) { return std::sqrt(dot(a, a, n)); }

inline double max_abs(const float* a, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i])));
  return m;
}

// Central difference of f with respect to x[i]; x is restored exactly afterwards.
inline double fd_element(const std::function<double()>& f, float* x, int64_t i, float eps) {
  const float orig = x[i];
  x[i] = orig + eps;
  const float up = x[i];
  const double fp = f();
  x[i] = orig - eps;
  const float dn = x[i];
  const double fm = f();
  x[i] = orig;
  return (fp - fm) / (double(up) - double(dn));  // the step actually taken in fp32
}

// Derivative of f along direction u by central differences with Richardson extrapolation:
// D(e) = (f(x + e·u) − f(x − e·u)) / 2e has error c·e² + O(e⁴), so (4·D(e/2) − D(e)) / 3 is
// accurate to O(e⁴). Directional steps move every element at once, so the curvature term would
// otherwise dominate at a step large enough to keep fp32 rounding small.
inline double fd_direction(const std::function<double()>& f, float* x, const float* u, int64_t n, float eps) {
  std::vector<float> orig(x, x + n);
  auto central = [&](float e) {
    for (int64_t i = 0; i < n; ++i) x[i] = orig[size_t(i)] + e * u[i];
    const double fp = f();
    for (int64_t i = 0; i < n; ++i) x[i] = orig[size_t(i)] - e * u[i];
    const double fm = f();
    return (fp - fm) / (2.0 * double(e));
  };
  const double d1 = central(eps), d2 = central(eps / 2);
  std::copy(orig.begin(), orig.end(), x);
  return (4.0 * d2 - d1) / 3.0;
}

struct Tol {
  double rtol = 2e-2;
  double atol_frac = 2e-3;  // absolute floor as a fraction of max |analytic| over the tensor
  double atol_min = 1e-6;
};

// Every element of `grad` (or `stride`-spaced ones) against its central difference.
inline void check_elements(const std::string& what, const std::function<double()>& f, float* x,
                           const float* grad, int64_t n, float eps, Tol tol = {}, int64_t stride = 1) {
  const double atol = std::max(tol.atol_min, tol.atol_frac * max_abs(grad, n));
  int failures = 0;
  for (int64_t i = 0; i < n; i += stride) {
    const double fd = fd_element(f, x, i, eps);
    const double an = double(grad[i]);
    if (std::fabs(fd - an) > tol.rtol * std::fabs(an) + atol) {
      if (++failures <= 5)
        ADD_FAILURE() << what << "[" << i << "]: analytic " << an << " vs finite difference " << fd
                      << " (atol " << atol << ")";
    }
  }
  EXPECT_EQ(failures, 0) << what << ": elements outside tolerance";
}

// Directional derivatives along two directions: a random one (catches errors spread over
// the elements) and the normalised analytic gradient itself (catches scale and sign errors,
// whose effect along a random direction can be small). atol is a floor relative to
// ||grad||·||u||, the largest value <grad, u> can take.
inline void check_directions(const std::string& what, const std::function<double()>& f, float* x,
                             const float* grad, int64_t n, float eps, uint32_t seed, double rtol = 2e-2,
                             double atol_frac = 1e-4) {
  const double gnorm = norm(grad, n);
  std::vector<float> dirs[2];
  dirs[0] = randn(n, seed);
  dirs[1].assign(grad, grad + n);
  if (gnorm > 0)
    for (auto& v : dirs[1]) v = float(double(v) / gnorm * std::sqrt(double(n)));
  for (int d = 0; d < 2; ++d) {
    const std::vector<float>& u = dirs[d];
    const double an = dot(grad, u.data(), n);
    const double fd = fd_direction(f, x, u.data(), n, eps);
    const double atol = std::max(1e-7, atol_frac * gnorm * norm(u.data(), n));
    EXPECT_LE(std::fabs(fd - an), rtol * std::fabs(an) + atol)
        << what << (d == 0 ? " (random direction)" : " (gradient direction)") << ": analytic " << an
        << " vs finite difference " << fd << ", |grad| " << gnorm;
  }
}

}  // namespace gradcheck
