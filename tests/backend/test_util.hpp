// SPDX-License-Identifier: MIT
// The one helper header of the backend's kernel tests (CUDA-free: the CPU reference tests use it
// too; gpu_test_util.hpp adds the device side). Fresh random inputs from one generator whose seed
// is printed, so that a failure can be replayed with MOESIM_TEST_SEED=<seed> (the one seed
// variable of every backend test, attention included); BF16 inputs as bits for the device and
// rounded values for the reference; two ways of comparing GPU outputs with CPU references:
// per-element bounds (compare / check_bf16 / check_f32: every element within its bound) and error
// norms (error_norms / within: relative L2 and max error of a whole tensor, for the attention
// kernels, whose bounds are stated per tensor). A NaN never passes: outputs are poisoned with NaN
// before each run, so an element the kernel did not write fails too.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/bf16.hpp"

namespace moesim::cuda::test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen([] {
    const char* env = std::getenv("MOESIM_TEST_SEED");
    const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("MOESIM_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
    return seed;
  }());
  return gen;
}

inline std::vector<bf16_bits> random_bf16(size_t n, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<float> d(static_cast<float>(lo), static_cast<float>(hi));
  std::vector<bf16_bits> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng()));
  return v;
}
inline std::vector<float> random_f32(size_t n, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<float> d(static_cast<float>(lo), static_cast<float>(hi));
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}
// Values in double, before any rounding to the device's types (to_bf16, to_f32 below).
inline std::vector<double> normal(size_t n, double sd = 1.0) {
  std::normal_distribution<double> d(0.0, sd);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}
inline std::vector<double> uniform(size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

// Rows of length `dim` scaled to unit L2 norm (KDA's q and k).
inline void l2_normalise_rows(std::vector<double>& v, size_t dim) {
  for (size_t r = 0; r < v.size() / dim; ++r) {
    double n2 = 0;
    for (size_t c = 0; c < dim; ++c) n2 += v[r * dim + c] * v[r * dim + c];
    const double inv = 1.0 / std::sqrt(n2);
    for (size_t c = 0; c < dim; ++c) v[r * dim + c] *= inv;
  }
}

// A BF16 tensor: the bits for the device and the rounded values (as double) for the reference.
struct Bf16Tensor {
  std::vector<bf16_bits> bits;
  std::vector<double> vals;
};
inline Bf16Tensor to_bf16(const std::vector<double>& v) {
  Bf16Tensor t;
  t.bits.resize(v.size());
  t.vals.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    t.bits[i] = float_to_bf16(static_cast<float>(v[i]));
    t.vals[i] = bf16_to_float(t.bits[i]);
  }
  return t;
}
// FP32 inputs: values rounded to float, for the device and the reference alike.
inline std::vector<float> to_f32(std::vector<double>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    f[i] = static_cast<float>(v[i]);
    v[i] = f[i];
  }
  return f;
}

inline std::vector<double> widen(const std::vector<bf16_bits>& b) {
  std::vector<double> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_float(b[i]);
  return v;
}
inline std::vector<double> widen(const std::vector<float>& f) { return {f.begin(), f.end()}; }

struct Comparison {
  size_t failures = 0;
  size_t first_bad = 0;
  double worst_ratio = 0;  // max |got - ref| / bound (NaN counts as infinite)
};

// got[i] passes when |got[i] - ref[i]| <= bound(i); written so that a NaN fails.
inline Comparison compare(size_t n, const std::function<double(size_t)>& got, std::span<const double> ref,
                          const std::function<double(size_t)>& bound) {
  Comparison c;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::abs(got(i) - ref[i]);
    const double b = bound(i);
    const bool ok = err <= b;
    if (!ok) {
      if (c.failures == 0) c.first_bad = i;
      ++c.failures;
    }
    const double ratio = ok ? err / (b > 0 ? b : 1) : (std::isnan(err) ? INFINITY : err / b);
    if (!(ratio <= c.worst_ratio)) c.worst_ratio = ratio;
  }
  return c;
}

inline void require_close(const std::string& what, const Comparison& c, std::span<const double> ref,
                          const std::function<double(size_t)>& got) {
  INFO(what << ": " << c.failures << " elements out of bound; first at " << c.first_bad
            << (c.failures ? " got " + std::to_string(got(c.first_bad)) + " want " + std::to_string(ref[c.first_bad]) : "")
            << "; worst |err|/bound " << c.worst_ratio);
  CHECK(c.failures == 0);
}

// BF16 output vs reference: check every element with the given bound.
inline void check_bf16(const std::string& what, std::span<const bf16_bits> got, std::span<const double> ref,
                       const std::function<double(size_t)>& bound) {
  REQUIRE(got.size() == ref.size());
  const auto g = [&](size_t i) { return static_cast<double>(bf16_to_float(got[i])); };
  require_close(what, compare(got.size(), g, ref, bound), ref, g);
}
inline void check_f32(const std::string& what, std::span<const float> got, std::span<const double> ref,
                      const std::function<double(size_t)>& bound) {
  REQUIRE(got.size() == ref.size());
  const auto g = [&](size_t i) { return static_cast<double>(got[i]); };
  require_close(what, compare(got.size(), g, ref, bound), ref, g);
}

// Error norms of a whole tensor.
struct ErrorReport {
  double rel_l2 = 0;   // ||got - want|| / ||want||
  double max_rel = 0;  // max |got - want| / max |want|
  size_t num_nan = 0;  // NaN or Inf in got (poisoned outputs that were never written show up here)
  std::string str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "rel_l2 %.3g, max_err/max_ref %.3g, non-finite %zu", rel_l2, max_rel, num_nan);
    return buf;
  }
};

inline ErrorReport error_norms(const std::vector<double>& got, const std::vector<double>& want) {
  ErrorReport r;
  double e2 = 0, w2 = 0, emax = 0, wmax = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++r.num_nan;
      continue;
    }
    const double e = got[i] - want[i];
    e2 += e * e;
    w2 += want[i] * want[i];
    emax = std::max(emax, std::abs(e));
    wmax = std::max(wmax, std::abs(want[i]));
  }
  r.rel_l2 = std::sqrt(e2 / std::max(w2, 1e-300));
  r.max_rel = emax / std::max(wmax, 1e-300);
  return r;
}

// Passes when nothing is NaN and both norms are within `tol`.
inline bool within(const ErrorReport& r, double tol) { return r.num_nan == 0 && r.rel_l2 <= tol && r.max_rel <= tol; }

}  // namespace moesim::cuda::test
