// SPDX-License-Identifier: MIT
// RoutingSampler against closed forms: counts conserve assignments, the cap holds, q is the
// water-filled popularity, and the draws follow the binomial/multinomial laws (moments and
// chi-square against the exact pmf).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "graph/routing.hpp"

using namespace moesim;

namespace {

RoutingSpec routing(RoutingDistribution distribution, double skew = 0, int64_t seed = 1) {
  RoutingSpec spec;
  spec.distribution = distribution;
  spec.skew = skew;
  spec.seed = seed;
  return spec;
}

RoutingSampler histogram_sampler(std::vector<double> histogram, int64_t top_k, int64_t ep) {
  const auto num = static_cast<int64_t>(histogram.size());
  return RoutingSampler(routing(RoutingDistribution::histogram), num, top_k, ep, std::move(histogram));
}

std::vector<int64_t> send(const RoutingSampler& s, int64_t step, int64_t layer, int64_t micro,
                          int64_t rank, int64_t num_tokens) {
  std::vector<int64_t> out(static_cast<size_t>(s.ep()));
  s.sample_send_counts(step, layer, micro, rank, num_tokens, out);
  return out;
}

std::vector<int64_t> local(const RoutingSampler& s, int64_t step, int64_t layer, int64_t micro,
                           int64_t rank, int64_t ep_rank, int64_t received) {
  std::vector<int64_t> out(static_cast<size_t>(s.experts_per_rank()));
  s.sample_local_expert_counts(step, layer, micro, rank, ep_rank, received, out);
  return out;
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }
bool non_negative(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x >= 0; });
}

// q is the water-filled p exactly when q_e = min(1/k, lambda * p_e) for one lambda and q sums to
// 1: the capped experts sit at the cap, the others keep p's proportions. lambda is read off the
// least popular expert with p > 0, which is never capped.
void check_water_filled(std::span<const double> q, std::span<const double> p, int64_t top_k) {
  REQUIRE(q.size() == p.size());
  const double cap = 1.0 / static_cast<double>(top_k);
  size_t least = p.size();
  for (size_t e = 0; e < p.size(); ++e) {
    if (p[e] > 0 && (least == p.size() || p[e] < p[least])) least = e;
  }
  REQUIRE(least < p.size());
  const double lambda = q[least] / p[least];
  double total = 0;
  for (size_t e = 0; e < q.size(); ++e) {
    CHECK(q[e] == doctest::Approx(std::min(cap, lambda * p[e])).epsilon(1e-12));
    CHECK(static_cast<double>(top_k) * q[e] <= 1 + 1e-12);
    total += q[e];
  }
  CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
}

double binomial_pmf(int64_t n, double p, int64_t x) {
  const auto nn = static_cast<double>(n);
  const auto xx = static_cast<double>(x);
  return std::exp(std::lgamma(nn + 1) - std::lgamma(xx + 1) - std::lgamma(nn - xx + 1) +
                  xx * std::log(p) + (nn - xx) * std::log1p(-p));
}

// Pearson's statistic of observed values against a pmf on 0..n, pooling neighbouring values
// until each bin expects at least 5. Returns {chi2, degrees of freedom}.
std::pair<double, int64_t> chi_square(const std::vector<int64_t>& samples, int64_t n,
                                      const std::function<double(int64_t)>& pmf) {
  std::vector<double> observed(static_cast<size_t>(n + 1), 0.0);
  for (int64_t x : samples) observed[static_cast<size_t>(x)] += 1;
  const auto num = static_cast<double>(samples.size());
  std::vector<std::pair<double, double>> bins;  // {expected, observed}
  double expected = 0;
  double seen = 0;
  for (int64_t x = 0; x <= n; ++x) {
    expected += num * pmf(x);
    seen += observed[static_cast<size_t>(x)];
    if (expected >= 5) {
      bins.emplace_back(expected, seen);
      expected = seen = 0;
    }
  }
  bins.back().first += expected;  // the tail joins the last bin
  bins.back().second += seen;
  double chi2 = 0;
  for (auto [e, o] : bins) chi2 += (o - e) * (o - e) / e;
  return {chi2, static_cast<int64_t>(bins.size()) - 1};
}

// A chi-square statistic that a correct sampler exceeds with probability ~1e-5 or less.
double chi_square_limit(int64_t df) { return static_cast<double>(df) + 6 * std::sqrt(2.0 * static_cast<double>(df)); }

}  // namespace

TEST_CASE("counts are non-negative and conserve every assignment") {
  std::vector<double> with_zeros(896, 1.0);
  for (size_t e = 0; e < with_zeros.size(); e += 3) with_zeros[e] = 0;  // whole ranks get little
  std::fill(with_zeros.begin() + 700, with_zeros.end(), 0.0);           // and some nothing
  const std::vector<RoutingSampler> samplers = [&] {
    std::vector<RoutingSampler> v;
    v.emplace_back(routing(RoutingDistribution::uniform), 896, 16, 64, std::vector<double>{});
    v.emplace_back(routing(RoutingDistribution::skewed, 1.5), 896, 16, 64, std::vector<double>{});
    v.emplace_back(routing(RoutingDistribution::skewed, 8.0), 896, 16, 64, std::vector<double>{});
    v.emplace_back(routing(RoutingDistribution::histogram), 896, 16, 64, with_zeros);
    v.emplace_back(routing(RoutingDistribution::uniform), 8, 8, 1, std::vector<double>{});
    return v;
  }();
  for (const RoutingSampler& s : samplers) {
    for (int64_t num_tokens : {0, 1, 2, 3, 100, 4097, 32768}) {
      for (int64_t step = 0; step < 3; ++step) {
        const std::vector<int64_t> out = send(s, step, 5, 0, 17, num_tokens);
        CHECK(non_negative(out));
        CHECK(sum(out) == num_tokens * s.top_k());
        for (int64_t r = 0; r < s.ep(); r += 7) {
          const std::vector<int64_t> experts = local(s, step, 5, 0, r, r, out[static_cast<size_t>(r)]);
          CHECK(non_negative(experts));
          CHECK(sum(experts) == out[static_cast<size_t>(r)]);
        }
      }
    }
  }
  // A histogram's zero-popularity ranks receive nothing while k experts with weight exist.
  const RoutingSampler& hist = samplers[3];
  for (int64_t r = 700 / 14; r < 64; ++r) {  // ranks 50-63 hold experts 700-895
    CHECK(hist.expected_fraction(1, r) == 0);
    CHECK(send(hist, 0, 1, 0, 0, 32768)[static_cast<size_t>(r)] == 0);
  }
}

TEST_CASE("the same arguments give the same counts; any other argument gives other counts") {
  const RoutingSampler s(routing(RoutingDistribution::skewed, 1.0, 7), 896, 16, 64, {});
  const std::vector<int64_t> base = send(s, 3, 10, 2, 40, 32768);
  CHECK(send(s, 3, 10, 2, 40, 32768) == base);
  // A second sampler with the same spec, queried after other calls, agrees.
  const RoutingSampler twin(routing(RoutingDistribution::skewed, 1.0, 7), 896, 16, 64, {});
  (void)send(twin, 0, 1, 0, 0, 100);
  (void)send(twin, 9, 12, 1, 3, 100);
  CHECK(send(twin, 3, 10, 2, 40, 32768) == base);

  CHECK(send(s, 4, 10, 2, 40, 32768) != base);  // step
  CHECK(send(s, 3, 11, 2, 40, 32768) != base);  // layer
  CHECK(send(s, 3, 10, 3, 40, 32768) != base);  // micro-batch
  CHECK(send(s, 3, 10, 2, 41, 32768) != base);  // rank
  const RoutingSampler other_seed(routing(RoutingDistribution::skewed, 1.0, 8), 896, 16, 64, {});
  CHECK(send(other_seed, 3, 10, 2, 40, 32768) != base);

  const std::vector<int64_t> experts = local(s, 3, 10, 2, 40, 20, 100000);
  CHECK(local(s, 3, 10, 2, 40, 20, 100000) == experts);
  CHECK(local(s, 4, 10, 2, 40, 20, 100000) != experts);
  CHECK(local(s, 3, 10, 2, 41, 20, 100000) != experts);
  CHECK(local(s, 3, 10, 3, 40, 20, 100000) != experts);
}

TEST_CASE("counts do not depend on thread, call order or warm()") {
  const RoutingSpec spec = routing(RoutingDistribution::skewed, 1.2, 3);
  const RoutingSampler serial(spec, 896, 16, 64, {});
  std::vector<int64_t> layers(16);
  std::iota(layers.begin(), layers.end(), int64_t{1});
  std::vector<std::vector<int64_t>> expected;
  for (int64_t layer : layers) expected.push_back(send(serial, 1, layer, 0, layer * 3, 32768));

  // Threads that build the lazy tables concurrently, each in its own order.
  const RoutingSampler shared(spec, 896, 16, 64, {});
  std::vector<std::vector<std::vector<int64_t>>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      got[t].resize(layers.size());
      for (size_t i = 0; i < layers.size(); ++i) {
        const size_t j = (i * 5 + t * 3) % layers.size();
        got[t][j] = send(shared, 1, layers[j], 0, layers[j] * 3, 32768);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const auto& g : got) CHECK(g == expected);

  RoutingSampler warmed(spec, 896, 16, 64, {});
  warmed.warm(layers);
  for (size_t i = 0; i < layers.size(); ++i) {
    CHECK(send(warmed, 1, layers[i], 0, layers[i] * 3, 32768) == expected[i]);
    const auto a = warmed.expert_probabilities(layers[i]);
    const auto b = serial.expert_probabilities(layers[i]);
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
}

TEST_CASE("uniform: each peer's share has the multinomial's mean, variance and covariance") {
  // E=64, k=8, ep=8: Q = 1/8 each; n = 8192 assignments per sender.
  const RoutingSampler s(routing(RoutingDistribution::uniform), 64, 8, 8, {});
  for (int64_t layer : {1, 2}) {
    for (int64_t r = 0; r < 8; ++r) CHECK(s.expected_fraction(layer, r) == doctest::Approx(0.125).epsilon(1e-14));
  }
  for (double q : s.expert_probabilities(1)) CHECK(q == doctest::Approx(1.0 / 64).epsilon(1e-14));

  for (int64_t num_tokens : {1024, 3}) {  // BTRS (n*Q = 1024) and inversion (n*Q = 3)
    CAPTURE(num_tokens);
    const double n = static_cast<double>(num_tokens * 8);
    const double share = 0.125;
    const int num_samples = 4000;
    std::vector<double> mean(8, 0.0);
    std::vector<double> square(8, 0.0);
    double cross = 0;  // sum of c_0 * c_7: the first and the last (remainder) peers
    for (int i = 0; i < num_samples; ++i) {
      const std::vector<int64_t> out = send(s, i, 1, 0, 0, num_tokens);
      for (size_t r = 0; r < 8; ++r) {
        mean[r] += static_cast<double>(out[r]);
        square[r] += static_cast<double>(out[r] * out[r]);
      }
      cross += static_cast<double>(out[0] * out[7]);
    }
    const double var = n * share * (1 - share);
    for (size_t r = 0; r < 8; ++r) {
      CAPTURE(r);
      mean[r] /= num_samples;
      const double sample_var = square[r] / num_samples - mean[r] * mean[r];
      CHECK(std::abs(mean[r] - n * share) < 4 * std::sqrt(var / num_samples));
      // The sample variance's relative standard error is sqrt(2/N) = 2.2%; allow ~5 of them
      // (small n adds some kurtosis).
      CHECK(sample_var == doctest::Approx(var).epsilon(0.12));
    }
    // Multinomial covariance -n*Q_0*Q_7: the conditional chain must leave the remainder correlated
    // with the first draw exactly as a multinomial does.
    // The sample covariance's standard error is sqrt(var^2 + cov^2 / N); allow 4 of them. A last
    // peer drawn independently (covariance 0) is 9 of them away.
    const double cov = cross / num_samples - mean[0] * mean[7];
    const double expected_cov = -n * share * share;
    CHECK(std::abs(cov - expected_cov) < 4 * std::sqrt((var * var + expected_cov * expected_cov) / num_samples));
  }
}

TEST_CASE("binomial draws match the exact binomial pmf (chi-square), in every regime") {
  // ep=2, E=2, k=1: out[0] ~ Binomial(T, p) with p = the first expert's histogram share.
  struct Case {
    int64_t n;
    double p;
  };
  const Case cases[] = {
      {5, 0.3},         // inversion, tiny n
      {2000, 0.004},    // inversion, large n and small p (n*p = 8)
      {21, 0.5},        // BTRS at its threshold (n*p = 10.5), symmetric
      {40, 0.3},        // BTRS, n*p = 12
      {1000, 0.8},      // BTRS on 1-p
      {100000, 0.37},   // BTRS, large n
      {30, 0.99},       // inversion on 1-p
  };
  for (const Case& c : cases) {
    CAPTURE(c.n);
    CAPTURE(c.p);
    const RoutingSampler s = histogram_sampler({c.p, 1 - c.p}, 1, 2);
    REQUIRE(s.expected_fraction(1, 0) == doctest::Approx(c.p).epsilon(1e-14));
    std::vector<int64_t> draws;
    for (int64_t step = 0; step < 100000; ++step) draws.push_back(send(s, step, 1, 0, 0, c.n)[0]);
    // Not a structured binding: CAPTURE's lambda cannot name one before clang 16.
    const std::pair<double, int64_t> result =
        chi_square(draws, c.n, [&](int64_t x) { return binomial_pmf(c.n, c.p, x); });
    const double chi2 = result.first;
    const int64_t df = result.second;
    CAPTURE(df);
    CHECK(df >= 2);
    CHECK(chi2 < chi_square_limit(df));
  }
}

TEST_CASE("skewed: q is the Zipf law water-filled under the top-k cap") {
  const int64_t num_experts = 64;
  std::vector<double> zipf(num_experts);
  for (int64_t i = 0; i < num_experts; ++i) zipf[static_cast<size_t>(i)] = std::pow(static_cast<double>(i + 1), -1.0);
  const double harmonic = std::accumulate(zipf.begin(), zipf.end(), 0.0);

  SUBCASE("no expert reaches the cap: q is Zipf itself") {  // 1/H_64 = 0.21 < 1/2
    const RoutingSampler s(routing(RoutingDistribution::skewed, 1.0), num_experts, 2, 8, {});
    std::vector<double> q(s.expert_probabilities(4).begin(), s.expert_probabilities(4).end());
    std::sort(q.rbegin(), q.rend());
    for (size_t i = 0; i < q.size(); ++i) CHECK(q[i] == doctest::Approx(zipf[i] / harmonic).epsilon(1e-12));
  }
  SUBCASE("hot experts are capped at 1/k and the rest keep Zipf's proportions") {
    const RoutingSampler s(routing(RoutingDistribution::skewed, 1.0), num_experts, 8, 8, {});
    std::vector<double> q(s.expert_probabilities(4).begin(), s.expert_probabilities(4).end());
    std::sort(q.rbegin(), q.rend());
    CHECK(q[0] == doctest::Approx(1.0 / 8).epsilon(1e-12));  // 1/H_64 = 0.21 > 1/8
    CHECK(q.back() < q[0]);
    check_water_filled(q, zipf, 8);
  }
  SUBCASE("extreme skew: the cap holds and everything sums to one") {
    const RoutingSampler s(routing(RoutingDistribution::skewed, 8.0), 896, 16, 64, {});
    std::vector<double> big_zipf(896);
    for (size_t i = 0; i < big_zipf.size(); ++i) big_zipf[i] = std::pow(static_cast<double>(i + 1), -8.0);
    for (int64_t layer : {1, 2, 93}) {
      std::vector<double> q(s.expert_probabilities(layer).begin(), s.expert_probabilities(layer).end());
      for (double x : q) CHECK(x >= 0);
      std::sort(q.rbegin(), q.rend());
      check_water_filled(q, big_zipf, 16);
      double fractions = 0;
      for (int64_t r = 0; r < 64; ++r) fractions += s.expected_fraction(layer, r);
      CHECK(fractions == doctest::Approx(1.0).epsilon(1e-12));
    }
  }
}

TEST_CASE("skewed: layers put their hot experts on different EP ranks") {
  const RoutingSampler s(routing(RoutingDistribution::skewed, 1.2), 896, 16, 64, {});
  std::set<int64_t> hottest_ranks;
  std::set<size_t> hottest_experts;
  for (int64_t layer = 1; layer <= 16; ++layer) {
    const auto q = s.expert_probabilities(layer);
    hottest_experts.insert(static_cast<size_t>(std::max_element(q.begin(), q.end()) - q.begin()));
    int64_t hottest = 0;
    for (int64_t r = 1; r < 64; ++r) {
      if (s.expected_fraction(layer, r) > s.expected_fraction(layer, hottest)) hottest = r;
    }
    hottest_ranks.insert(hottest);
  }
  // 16 draws of 64 ranks: a repeat is likely, 4 or fewer distinct ranks would be a broken shuffle.
  CHECK(hottest_ranks.size() >= 8);
  CHECK(hottest_experts.size() >= 8);
}

TEST_CASE("skewed: the hot rank gets its expected share of the draws") {
  const RoutingSampler s(routing(RoutingDistribution::skewed, 1.5), 64, 4, 8, {});
  const double n = 2048.0 * 4;
  const int num_samples = 3000;
  std::vector<double> mean(8, 0.0);
  for (int i = 0; i < num_samples; ++i) {
    const std::vector<int64_t> out = send(s, i, 7, 0, 2, 2048);
    for (size_t r = 0; r < 8; ++r) mean[r] += static_cast<double>(out[r]) / num_samples;
  }
  double largest = 0;
  for (int64_t r = 0; r < 8; ++r) {
    const double share = s.expected_fraction(7, r);
    largest = std::max(largest, share);
    CHECK(std::abs(mean[static_cast<size_t>(r)] - n * share) < 4 * std::sqrt(n * share * (1 - share) / num_samples));
  }
  CHECK(largest > 0.2);  // the test is about skew: one rank clearly above 1/8
}

TEST_CASE("skew 0 is uniform routing") {
  const RoutingSampler flat(routing(RoutingDistribution::skewed, 0.0, 5), 896, 16, 64, {});
  const RoutingSampler uniform(routing(RoutingDistribution::uniform, 0.0, 5), 896, 16, 64, {});
  for (int64_t layer : {1, 50}) {
    for (double q : flat.expert_probabilities(layer)) CHECK(q == doctest::Approx(1.0 / 896).epsilon(1e-14));
    CHECK(send(flat, 2, layer, 0, 9, 32768) == send(uniform, 2, layer, 0, 9, 32768));
    CHECK(local(flat, 2, layer, 0, 9, 9, 8192) == local(uniform, 2, layer, 0, 9, 9, 8192));
  }
}

TEST_CASE("histogram: q is proportional to the histogram, after the cap") {
  SUBCASE("below the cap") {
    const std::vector<double> hist = {5, 1, 0, 3, 2, 2, 7, 4, 0.5, 6, 1, 1, 3, 2, 2, 1};
    const RoutingSampler s = histogram_sampler(hist, 2, 4);
    const double total = std::accumulate(hist.begin(), hist.end(), 0.0);
    for (int64_t layer : {1, 2, 60}) {  // the same for every layer
      const auto q = s.expert_probabilities(layer);
      for (size_t e = 0; e < hist.size(); ++e) CHECK(q[e] == doctest::Approx(hist[e] / total).epsilon(1e-12));
      CHECK(s.expected_fraction(layer, 1) == doctest::Approx((2 + 2 + 7 + 4) / total).epsilon(1e-12));
    }
  }
  SUBCASE("the header's worked example") {
    const RoutingSampler s = histogram_sampler({0.55, 0.25, 0.15, 0.05}, 2, 2);
    const auto q = s.expert_probabilities(1);
    CHECK(q[0] == doctest::Approx(0.5).epsilon(1e-12));
    CHECK(q[1] == doctest::Approx(0.5 * 25 / 45).epsilon(1e-12));
    CHECK(q[2] == doctest::Approx(0.5 * 15 / 45).epsilon(1e-12));
    CHECK(q[3] == doctest::Approx(0.5 * 5 / 45).epsilon(1e-12));
    CHECK(s.expected_fraction(1, 0) == doctest::Approx(0.7778).epsilon(1e-4));
    check_water_filled(q, std::vector<double>{0.55, 0.25, 0.15, 0.05}, 2);
  }
  SUBCASE("several experts over the cap") {
    const std::vector<double> hist = {40, 1, 30, 2, 3, 20, 1, 1, 2, 1, 1, 1};
    const RoutingSampler s = histogram_sampler(hist, 4, 3);
    const auto q = s.expert_probabilities(1);
    check_water_filled(q, hist, 4);
    CHECK(q[0] == doctest::Approx(0.25).epsilon(1e-12));
    CHECK(q[2] == doctest::Approx(0.25).epsilon(1e-12));
  }
  SUBCASE("fewer than k experts with weight: the rest share what the cap leaves") {
    const RoutingSampler s = histogram_sampler({3, 0, 0, 0}, 2, 2);
    const auto q = s.expert_probabilities(1);
    CHECK(q[0] == doctest::Approx(0.5).epsilon(1e-12));
    for (size_t e = 1; e < 4; ++e) CHECK(q[e] == doctest::Approx(0.5 / 3).epsilon(1e-12));
  }
}

TEST_CASE("local expert counts follow Multinomial(R, q_e / Q_r)") {
  // A skewed layer, so that the local probabilities differ; 16 experts per rank.
  const RoutingSampler s(routing(RoutingDistribution::skewed, 1.0, 11), 64, 4, 4, {});
  const int64_t layer = 3;
  const auto q = s.expert_probabilities(layer);
  const int64_t received = 500;
  const int num_samples = 4000;
  for (int64_t ep_rank = 0; ep_rank < 4; ++ep_rank) {
    CAPTURE(ep_rank);
    const double rank_share = s.expected_fraction(layer, ep_rank);
    std::vector<double> prob(16);
    for (size_t i = 0; i < 16; ++i) prob[i] = q[static_cast<size_t>(ep_rank) * 16 + i] / rank_share;

    std::vector<double> total(16, 0.0);
    double mean_statistic = 0;  // per-draw Pearson statistic; its mean is exactly 16-1 = 15
    for (int i = 0; i < num_samples; ++i) {
      const std::vector<int64_t> out = local(s, i, layer, 0, ep_rank * 2, ep_rank, received);
      double statistic = 0;
      for (size_t e = 0; e < 16; ++e) {
        total[e] += static_cast<double>(out[e]);
        const double expected = static_cast<double>(received) * prob[e];
        statistic += (static_cast<double>(out[e]) - expected) * (static_cast<double>(out[e]) - expected) / expected;
      }
      mean_statistic += statistic / num_samples;
    }
    // Pooled counts: Multinomial(N*R, prob), so Pearson's chi-square with 15 degrees of freedom.
    double chi2 = 0;
    for (size_t e = 0; e < 16; ++e) {
      const double expected = static_cast<double>(received) * num_samples * prob[e];
      chi2 += (total[e] - expected) * (total[e] - expected) / expected;
    }
    CHECK(chi2 < chi_square_limit(15));
    // Dispersion: a sampler with the right means but too much or too little spread fails this.
    // The per-draw statistic has variance ~2*15, so its mean over N draws has SD ~0.09; 0.45 is
    // 5 of them, and catches a variance 3% off.
    CHECK(std::abs(mean_statistic - 15.0) < 0.45);
  }
}

TEST_CASE("group loads: what every member receives and keeps has the law of the per-sender draws") {
  // E=64, k=8, ep=8, n = 8192 assignments per sender. Summing the 8 senders' multinomials,
  // received[r] ~ Binomial(8n, 1/8) and kept[r] (sent by r to itself) ~ Binomial(n, 1/8); the
  // group draw must reproduce both laws, conserve assignments, and be a pure function of its key.
  const RoutingSampler s(routing(RoutingDistribution::uniform), 64, 8, 8, {});
  const int64_t num_tokens = 1024;
  const double n = static_cast<double>(num_tokens * 8);
  const int num_samples = 4000;
  double received_sum = 0, received_square = 0, kept_sum = 0, kept_square = 0;
  std::vector<int64_t> received(8), kept(8), again(8), again_kept(8);
  for (int i = 0; i < num_samples; ++i) {
    s.sample_group_loads(i, 1, 0, 0, num_tokens, received, kept);
    CHECK(std::accumulate(received.begin(), received.end(), int64_t{0}) == 8 * num_tokens * 8);
    for (size_t r = 0; r < 8; ++r) CHECK((kept[r] >= 0 && kept[r] <= received[r]));
    received_sum += static_cast<double>(received[3]);
    received_square += static_cast<double>(received[3] * received[3]);
    kept_sum += static_cast<double>(kept[3]);
    kept_square += static_cast<double>(kept[3] * kept[3]);
  }
  const double received_mean = received_sum / num_samples;
  const double received_var = 8 * n * 0.125 * 0.875;
  CHECK(std::abs(received_mean - 8 * n * 0.125) < 4 * std::sqrt(received_var / num_samples));
  CHECK(received_square / num_samples - received_mean * received_mean == doctest::Approx(received_var).epsilon(0.12));
  const double kept_mean = kept_sum / num_samples;
  const double kept_var = n * 0.125 * 0.875;
  CHECK(std::abs(kept_mean - n * 0.125) < 4 * std::sqrt(kept_var / num_samples));
  CHECK(kept_square / num_samples - kept_mean * kept_mean == doctest::Approx(kept_var).epsilon(0.12));

  s.sample_group_loads(7, 1, 0, 0, num_tokens, received, kept);
  s.sample_group_loads(7, 1, 0, 0, num_tokens, again, again_kept);
  CHECK(received == again);
  CHECK(kept == again_kept);
  s.sample_group_loads(7, 1, 0, 8, num_tokens, again, again_kept);  // another group
  CHECK(received != again);
}
