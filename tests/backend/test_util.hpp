// SPDX-License-Identifier: MIT
// Helpers for the backend's kernel tests: fresh random inputs (the seed is printed so a failure
// can be replayed with MOESIM_TEST_SEED), and comparison of GPU outputs with CPU references
// under per-element bounds. A NaN never passes: outputs are poisoned with NaN before each run, so
// an element the kernel did not write fails too.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
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

}  // namespace moesim::cuda::test
