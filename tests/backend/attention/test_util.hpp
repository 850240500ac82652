// SPDX-License-Identifier: MIT
// Helpers for the attention kernel tests: fresh random inputs (seed printed; ATTN_TEST_SEED
// repeats a run), BF16 rounding as the GPU sees it, error norms that fail on NaN, a device probe.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/bf16.hpp"

namespace moesim::cuda::test {

inline bool has_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    uint64_t seed = std::random_device{}();
    if (const char* s = std::getenv("ATTN_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
    std::printf("ATTN_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
  }();
  return gen;
}

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
  std::vector<uint16_t> bits;
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

inline std::vector<double> widen(const std::vector<uint16_t>& b) {
  std::vector<double> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_float(b[i]);
  return v;
}
inline std::vector<double> widen(const std::vector<float>& f) { return {f.begin(), f.end()}; }

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

inline ErrorReport compare(const std::vector<double>& got, const std::vector<double>& want) {
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

// GPU test mains: exit 77 (meson SKIP) without a device.
#define ATTN_GPU_TEST_MAIN                        \
  int main(int argc, char** argv) {               \
    if (!moesim::cuda::test::has_cuda_device()) { \
      std::puts("no CUDA device: skipped");       \
      return 77;                                  \
    }                                             \
    doctest::Context ctx(argc, argv);             \
    return ctx.run();                             \
  }
