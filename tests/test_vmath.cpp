// The vector math behind softmax (exp) and GELU (erf), swept against double precision:
//  - every kernel set this CPU runs (libmvec on x86-64, kernels/cpu/vmath.inc on aarch64),
//    through the ISA table, as the engine calls them;
//  - vmath.inc itself, compiled here for 4-float vectors, so that the aarch64 code is checked on
//    every x86-64 run too (CI runs the aarch64 build only under emulation).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

namespace vmath_check {
typedef float vf __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(4 * sizeof(int32_t))));
inline vf splat(float x) { return vf{x, x, x, x}; }
#include "kernels/cpu/vmath.inc"

void map(const std::vector<float>& x, std::vector<float>& y, vf (*f)(vf)) {
  y.resize(x.size());
  for (size_t i = 0; i < x.size(); i += 4) {
    vf v{};
    for (size_t j = 0; j < 4 && i + j < x.size(); ++j) v[j] = x[i + j];
    v = f(v);
    for (size_t j = 0; j < 4 && i + j < x.size(); ++j) y[i + j] = v[j];
  }
}
vf exp4(vf v) { return vec_exp(v); }
vf erf4(vf v) { return vec_erf(v); }
}  // namespace vmath_check

using namespace mimi;

namespace {

// The distance from `want` (exact, in double) to `got` in units of the float spacing at want
// (the subnormal spacing at least). Both NaN: 0; infinities must match exactly.
double ulps(double want, float got) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e9;
  if (std::isnan(got)) return 1e9;
  // an infinite got counts as 2^128, one spacing (2^104) past the largest float: an overflow
  // one rounding away from FLT_MAX is 1 ulp, not infinitely many
  const double big = 3.402823669209385e38, top_spacing = 2.028240960365167e31;  // 2^128, 2^104
  const double g = std::isinf(got) ? std::copysign(big, double(got)) : double(got);
  if (std::abs(want) > double(std::numeric_limits<float>::max()))  // rounds to inf, or to FLT_MAX just past it
    return std::isinf(got) && (got > 0) == (want > 0) ? 0.0 : std::abs(g - want) / top_spacing;
  const float w = float(want);
  const double spacing = std::max(std::abs(double(std::nextafter(w, std::numeric_limits<float>::infinity())) -
                                           double(w)),
                                  1.4012984643248171e-45);
  return std::abs(g - want) / spacing;
}

std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> x;
  for (int i = 0; i <= n; ++i) x.push_back(lo + (hi - lo) * float(i) / float(n));
  return x;
}

void add_specials(std::vector<float>& x) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-30f, -1e-30f, 1e-40f, -1e-40f,
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    x.push_back(v);
  for (float v = 1e-3f; v > 1e-44f; v *= 0.37f) x.insert(x.end(), {v, -v});  // tiny arguments
}

// exp: every float from the subnormal results to overflow, densely, and the specials.
std::vector<float> exp_inputs() {
  std::vector<float> x = sweep(-110.0f, 90.0f, 400000);
  const std::vector<float> near0 = sweep(-1.0f, 1.0f, 20000);
  x.insert(x.end(), near0.begin(), near0.end());
  for (float v : {88.72283f, 88.72284f, 88.7229f, -87.33654f, -87.3366f, -103.2789f, -103.9721f, -104.0f})
    x.push_back(v);
  add_specials(x);
  return x;
}
double worst_exp(const std::vector<float>& x, const std::vector<float>& y) {
  double worst = 0;
  float at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = ulps(std::exp(double(x[i])), y[i]);
    if (u > worst) worst = u, at = x[i];
  }
  MESSAGE("exp: worst " << worst << " ulp at x = " << at);
  return worst;
}

// erf: |x| up to 6 densely (erf is +-1 in float beyond 3.92), the specials. Measured in ulps and
// in absolute error, since near 1 the two differ little and GELU needs the absolute one.
std::vector<float> erf_inputs() {
  std::vector<float> x = sweep(-6.0f, 6.0f, 400000);
  add_specials(x);
  return x;
}

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2)); }

}  // namespace

TEST_CASE("vmath.inc exp (4-float vectors): within 2 ulp from subnormal results to overflow") {
  const std::vector<float> x = exp_inputs();
  std::vector<float> y;
  vmath_check::map(x, y, vmath_check::exp4);
  const double worst = worst_exp(x, y);
  MESSAGE("vmath.inc exp: worst " << worst << " ulp over " << x.size() << " inputs");
  CHECK(worst <= 2.0);
}

TEST_CASE("vmath.inc erf (4-float vectors): within 2 ulp, odd, +-1 far out, NaN kept") {
  const std::vector<float> x = erf_inputs();
  std::vector<float> y;
  vmath_check::map(x, y, vmath_check::erf4);
  double worst = 0, worst_abs = 0;
  float at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::erf(double(x[i]));
    if (ulps(want, y[i]) > worst) worst = ulps(want, y[i]), at = x[i];
    if (!std::isnan(want)) worst_abs = std::max(worst_abs, std::abs(double(y[i]) - want));
  }
  MESSAGE("vmath.inc erf: worst " << worst << " ulp (at x = " << at << "), " << worst_abs << " absolute");
  CHECK(worst <= 2.0);
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i])) {
      std::vector<float> neg{-x[i]}, yn;
      vmath_check::map(neg, yn, vmath_check::erf4);
      if (yn[0] != -y[i]) FAIL("erf not odd at " << x[i]);
    }
}

TEST_CASE("every kernel set's exp and GELU against double precision") {
  const cpu::IsaChoice* isas;
  const int n = cpu::isa_choices(&isas);
  int ran = 0;
  for (int v = 0; v < n; ++v) {
    if (!isas[v].runs_here) continue;
    ++ran;
    const cpu::IsaKernels& k = *isas[v].kernels;
    const std::string name = k.name;
    CAPTURE(name);
    const std::vector<float> x = exp_inputs();
    std::vector<float> y(x.size());
    k.exp_serial(int64_t(x.size()), x.data(), y.data());
    const double worst = worst_exp(x, y);
    // GELU: 0.5 x (1 + erf(x / sqrt 2)). An erf error e moves it by 0.5 |x| e, which for x < 0
    // (1 + erf cancels) is large against the result: bounded by 4 ulp of the result plus that
    // for e = 2.4e-7, libmvec's promise (4 ulp) for erf near +-1.
    const std::vector<float> g = erf_inputs();
    std::vector<float> gy(g.size());
    k.gelu_serial(int64_t(g.size()), g.data(), gy.data());
    double worst_g = 0;
    float at = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isinf(g[i]) || std::isnan(g[i])) continue;  // (checked below)
      const double want = gelu(double(g[i]));
      const double err = std::abs(double(gy[i]) - want);
      const double spacing = std::max(std::abs(double(std::nextafter(float(want), 1e30f)) - double(float(want))), 1.4e-45);
      const double r = err / (4 * spacing + 2.4e-7 * 0.5 * std::abs(double(g[i])));
      if (r > worst_g) worst_g = r, at = g[i];
    }
    MESSAGE(name << ": exp worst " << worst << " ulp; GELU worst " << worst_g
                 << " of (4 ulp + 0.5 |x| 2.4e-7), at x = " << at);
    CHECK(worst <= 4.0);  // glibc's libmvec promises 4 ulp
    CHECK(worst_g <= 1.0);
    const float sp[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
    float so[3];
    k.gelu_serial(3, sp, so);
    CHECK(so[0] == std::numeric_limits<float>::infinity());
    CHECK(std::isnan(so[2]));
  }
  CHECK(ran > 0);
}
