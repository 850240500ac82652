// SPDX-License-Identifier: MIT
// RoutingSampler's mechanisms beyond a popularity distribution, against closed forms computed by
// hand: limited routing (a token's experts on at most M groups, nodes or devices) drawn token by
// token and as counts, device-limited copies, expert capacity (drop and pad), and the
// auxiliary-loss-free bias balancing trajectory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "graph/routing.hpp"

using namespace moesim;

namespace {

// 16 experts on 4 nodes of 2 EP ranks (2 experts per rank, 4 per node), top-4, a token on at most
// 2 nodes. Popularity by hand: node 0 holds 40 of 72, node 1 20, node 2 8 (3, 3, 1, 1), node 3 4.
// No expert exceeds 1/k = 0.25, so q = p. Node shares W = (40, 20, 8, 4)/72; under the cap
// 1/M = 0.5 node 0 gets 0.5 and the other 0.5 is spread 20:8:4, so W' = (0.5, 0.3125, 0.125,
// 0.0625). Inside node 2 the split is (3, 3, 1, 1)/8 (under the cap 1/ceil(4/2) = 0.5).
const std::vector<double> kHistogram = {10, 10, 10, 10, 5, 5, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1};
const std::vector<double> kNodeShare = {0.5, 0.3125, 0.125, 0.0625};
const std::vector<double> kExpertShare = {0.125,    0.125,    0.125,    0.125,    0.078125, 0.078125,
                                          0.078125, 0.078125, 0.046875, 0.046875, 0.015625, 0.015625,
                                          0.015625, 0.015625, 0.015625, 0.015625};

RoutingSampler node_limited(int64_t nodes_per_token) {
  RoutingSpec spec;
  spec.distribution = RoutingDistribution::histogram;
  spec.nodes_per_token = nodes_per_token;
  return RoutingSampler(spec, 16, 4, 8, kHistogram, 2);
}

}  // namespace

TEST_CASE("node-limited routing: q' = W'_u r_e by hand, and the EP ranks' shares follow") {
  const RoutingSampler s = node_limited(2);
  REQUIRE(s.limited());
  CHECK(s.limit_units() == 4);
  const auto q = s.expert_probabilities(1);
  for (size_t e = 0; e < 16; ++e) CHECK(q[e] == doctest::Approx(kExpertShare[e]).epsilon(1e-12));
  for (int64_t r = 0; r < 8; ++r) {
    CHECK(s.expected_fraction(1, r) == doctest::Approx(kExpertShare[2 * r] + kExpertShare[2 * r + 1]).epsilon(1e-12));
  }
  // M = all nodes is no limit: q is the popularity itself.
  const RoutingSampler all = node_limited(4);
  CHECK_FALSE(all.limited());
  for (size_t e = 0; e < 16; ++e) CHECK(all.expert_probabilities(1)[e] == doctest::Approx(kHistogram[e] / 72).epsilon(1e-12));
}

TEST_CASE("node-limited routing: in a million tokens none spans more than M nodes, and node loads match W'") {
  const RoutingSampler s = node_limited(2);
  const int64_t tokens = 1000000;
  const std::vector<int32_t> experts = s.sample_tokens(0, 1, 0, tokens);
  REQUIRE(experts.size() == static_cast<size_t>(tokens * 4));
  std::vector<double> per_node(4, 0), per_expert(16, 0);
  int64_t over = 0, not_distinct = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::set<int32_t> mine, nodes;
    for (int i = 0; i < 4; ++i) {
      const int32_t e = experts[static_cast<size_t>(t * 4 + i)];
      mine.insert(e);
      nodes.insert(e / 4);
      per_node[static_cast<size_t>(e / 4)] += 1;
      per_expert[static_cast<size_t>(e)] += 1;
    }
    over += nodes.size() > 2;
    not_distinct += mine.size() != 4;
  }
  CHECK(over == 0);
  CHECK(not_distinct == 0);
  const double n = 4.0 * static_cast<double>(tokens);
  // 5 standard deviations of a share estimated from n assignments (tokens are independent; a
  // token's 4 assignments are at most perfectly correlated, so sd <= sqrt(4 p (1-p) / n)).
  for (size_t u = 0; u < 4; ++u) {
    const double sd = std::sqrt(4 * kNodeShare[u] * (1 - kNodeShare[u]) / n);
    CHECK(std::abs(per_node[u] / n - kNodeShare[u]) < 5 * sd);
  }
  for (size_t e = 0; e < 16; ++e) {
    const double sd = std::sqrt(4 * kExpertShare[e] * (1 - kExpertShare[e]) / n);
    CHECK(std::abs(per_expert[e] / n - kExpertShare[e]) < 5 * sd);
  }
}

TEST_CASE("node-limited routing at scale: DeepSeek-V3's 256 experts, top-8, 4 of 8 nodes, skewed") {
  RoutingSpec spec;
  spec.distribution = RoutingDistribution::skewed;
  spec.skew = 1.0;
  spec.nodes_per_token = 4;
  const RoutingSampler s(spec, 256, 8, 64, {}, 8);
  const int64_t tokens = 1000000;
  const std::vector<int32_t> experts = s.sample_tokens(3, 5, 1, tokens);
  int64_t over = 0, exact = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::set<int32_t> nodes, mine;
    for (int i = 0; i < 8; ++i) {
      const int32_t e = experts[static_cast<size_t>(t * 8 + i)];
      nodes.insert(e / 32);
      mine.insert(e);
    }
    over += nodes.size() > 4;
    exact += nodes.size() == 4 && mine.size() == 8;
  }
  CHECK(over == 0);
  CHECK(exact == tokens);  // the even split: 2 experts on each of exactly 4 nodes
  // The count draws have the closed-form mean: sum over draws of received / (ep T k) -> Q_r.
  std::vector<int64_t> received(64), kept(64);
  std::vector<double> mean(64, 0);
  const int draws = 400;
  for (int d = 0; d < draws; ++d) {
    s.sample_group_loads(d, 5, 0, 0, 4096, received, kept);
    for (size_t r = 0; r < 64; ++r) mean[r] += static_cast<double>(received[r]) / (64.0 * 4096 * 8 * draws);
  }
  for (int64_t r = 0; r < 64; ++r) {
    const double q = s.expected_fraction(5, r);
    const double sd = std::sqrt(q * (1 - q) / (64.0 * 4096 * 8 * draws));
    CHECK(std::abs(mean[static_cast<size_t>(r)] - q) < 5 * sd);
  }
  // The cap 1/M on a node's share: no node takes more than a quarter of the load.
  for (int64_t node = 0; node < 8; ++node) {
    double share = 0;
    for (int64_t r = 8 * node; r < 8 * node + 8; ++r) share += s.expected_fraction(5, r);
    CHECK(share <= 0.25 + 1e-12);
  }
}

TEST_CASE("device-limited routing: at most M ranks a token, copies conserve and carry k/M assignments") {
  RoutingSpec spec;
  spec.devices_per_token = 3;  // 64 experts on 16 ranks (4 each), top-8: 3, 3 and 2 per rank
  const RoutingSampler s(spec, 64, 8, 16, {});
  REQUIRE(s.dedups_devices());
  CHECK(s.units_reached() == 3);
  const std::vector<int32_t> experts = s.sample_tokens(0, 1, 0, 1000000);
  int64_t over = 0;
  for (size_t t = 0; t < experts.size() / 8; ++t) {
    std::set<int32_t> ranks;
    for (size_t i = 0; i < 8; ++i) ranks.insert(experts[t * 8 + i] / 4);
    over += ranks.size() > 3;
  }
  CHECK(over == 0);
  // Uniform routing: every expert keeps 1/E whatever the limit.
  for (double q : s.expert_probabilities(1)) CHECK(q == doctest::Approx(1.0 / 64).epsilon(1e-12));
  std::vector<int64_t> copies(16), kept_copies(16), received(16), kept(16);
  double total_copies = 0, total_rows = 0;
  const int draws = 200;
  for (int d = 0; d < draws; ++d) {
    s.sample_group_copies(d, 1, 0, 0, 1000, copies, kept_copies, received, kept);
    CHECK(std::accumulate(copies.begin(), copies.end(), int64_t{0}) == 16 * 1000 * 3);
    for (size_t r = 0; r < 16; ++r) {
      CHECK(kept_copies[r] <= copies[r]);
      CHECK(kept[r] <= received[r]);
      // A copy carries 2 or 3 assignments.
      CHECK(received[r] >= 2 * copies[r]);
      CHECK(received[r] <= 3 * copies[r]);
    }
    total_copies += static_cast<double>(std::accumulate(copies.begin(), copies.end(), int64_t{0}));
    total_rows += static_cast<double>(std::accumulate(received.begin(), received.end(), int64_t{0}));
  }
  // 8/3 assignments per copy: sd of the mean is about sqrt(2/9 / copies).
  CHECK(std::abs(total_rows / total_copies - 8.0 / 3) < 5 * std::sqrt(2.0 / 9 / total_copies));
}

TEST_CASE("capacity: dropless uniform routing equals padding at capacity 1.0 in expectation") {
  RoutingSpec dropless;
  const RoutingSampler free(dropless, 64, 8, 8, {});
  RoutingSpec padded;
  padded.capacity_factor = 1.0;
  padded.capacity_policy = CapacityPolicy::pad;
  const RoutingSampler pad(padded, 64, 8, 8, {});
  // C = ceil(1.0 * 8 ranks * 1000 tokens * 8 / 64) = 1000; a rank's 8 experts pad to 8000 = T k.
  CHECK(pad.expert_capacity(1000) == 1000);
  CHECK(free.expert_capacity(1000) == -1);
  std::vector<int64_t> received(8), kept(8);
  double mean = 0;
  const int draws = 500;
  for (int d = 0; d < draws; ++d) {
    free.sample_group_loads(d, 1, 0, 0, 1000, received, kept);
    for (size_t r = 0; r < 8; ++r) {
      CHECK(free.processed_rows(d, 1, 0, 0, static_cast<int64_t>(r), 1000, received[r]) == received[r]);
      CHECK(pad.processed_rows(d, 1, 0, 0, static_cast<int64_t>(r), 1000, received[r]) == 8000);
      mean += static_cast<double>(received[r]) / (8.0 * draws);
    }
  }
  // E[received] = T k = 8000 exactly; sd of the mean of 4000 rank draws is sqrt(64000 * 7/8 / 4000).
  CHECK(std::abs(mean - 8000) < 5 * std::sqrt(64000.0 * 7 / 8 / (8.0 * draws)));
  // At 1.25 the capacity rounds up: ceil(1250) with the balanced load 1000.
  padded.capacity_factor = 1.25;
  CHECK(RoutingSampler(padded, 64, 8, 8, {}).expert_capacity(1000) == 1250);
  padded.capacity_factor = 1.0;
  CHECK(RoutingSampler(padded, 64, 8, 8, {}).expert_capacity(999) == 999);
  padded.capacity_factor = 1.1;  // 1100, not the 1101 that 1.1 x 1000 = 1100.0000000000002 rounds up to
  CHECK(RoutingSampler(padded, 64, 8, 8, {}).expert_capacity(1000) == 1100);
}

TEST_CASE("capacity with drop: no expert processes more than C, and below C nothing is lost") {
  RoutingSpec spec;
  spec.distribution = RoutingDistribution::skewed;
  spec.skew = 1.2;
  spec.capacity_factor = 1.0;
  const RoutingSampler s(spec, 64, 8, 8, {});
  const int64_t capacity = s.expert_capacity(1000);
  REQUIRE(capacity == 1000);
  std::vector<int64_t> received(8), kept(8);
  int64_t dropped_somewhere = 0;
  for (int d = 0; d < 50; ++d) {
    s.sample_group_loads(d, 2, 0, 0, 1000, received, kept);
    for (size_t r = 0; r < 8; ++r) {
      const int64_t rows = s.processed_rows(d, 2, 0, 0, static_cast<int64_t>(r), 1000, received[r]);
      CHECK(rows <= received[r]);
      CHECK(rows <= s.experts_per_rank() * capacity);
      dropped_somewhere += rows < received[r];
      // Loads well under C (at most C in total over the rank's experts) lose nothing.
      if (received[r] <= capacity) CHECK(rows == received[r]);
    }
  }
  CHECK(dropped_somewhere > 0);  // Zipf 1.2 overloads the hottest experts
}

TEST_CASE("bias balancing: +-gamma by the sign of the load error, converging from a skewed start") {
  RoutingSpec spec;
  spec.distribution = RoutingDistribution::skewed;
  spec.skew = 1.0;
  spec.bias_update_speed = 0.05;
  const RoutingSampler s(spec, 64, 8, 8, {});
  RoutingSpec plain = spec;
  plain.bias_update_speed = 0;
  const RoutingSampler skewed(plain, 64, 8, 8, {});
  // Step 0 is the skewed start itself; step 1 moved every bias by exactly gamma against its error.
  const auto q0 = s.expert_probabilities(3, 0);
  for (size_t e = 0; e < 64; ++e) CHECK(q0[e] == skewed.expert_probabilities(3)[e]);
  const std::vector<double> b1 = s.expert_biases(3, 1);
  for (size_t e = 0; e < 64; ++e) CHECK(b1[e] == (q0[e] > 1.0 / 64 ? -0.05 : 0.05));
  // The busiest EP rank's expected share over its balanced 1/8.
  auto worst = [&](int64_t step) {
    double most = 0;
    for (int64_t r = 0; r < 8; ++r) most = std::max(most, s.expected_fraction(3, r, step) * 8);
    return most;
  };
  CHECK(worst(0) > 1.5);
  CHECK(worst(10) < worst(0));
  CHECK(worst(40) < worst(10));
  // Converged: every expert within a band of a few gamma of its share (e^{2 gamma} = 1.105).
  const auto q = s.expert_probabilities(3, 400);
  for (double x : q) CHECK(std::abs(x * 64 - 1) < 0.2);
  // Asking again for an earlier step gives the same table (the trajectory is deterministic).
  CHECK(worst(10) == worst(10));
  const RoutingSampler twin(spec, 64, 8, 8, {});
  CHECK(twin.expert_probabilities(3, 10)[7] == s.expert_probabilities(3, 10)[7]);
  // Uniform routing is balanced already: the bias never moves.
  spec.distribution = RoutingDistribution::uniform;
  spec.skew = 0;
  const RoutingSampler uniform(spec, 64, 8, 8, {});
  for (double b : uniform.expert_biases(1, 50)) CHECK(b == 0);
}
