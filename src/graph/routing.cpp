// SPDX-License-Identifier: MIT
// RoutingSampler: per-layer capped expert probabilities and exact multinomial draws of send and
// per-expert receive counts from a counter-based generator.
//
// Cost, measured with a throwaway timing loop (g++ 12 -O2 as in the debugoptimized build, one core
// of an AMD EPYC, 200k calls over 93 warmed layers): sample_send_counts for the default case
// (E=896, k=16, ep=64, T=32768, so n=524288 and 63 binomials, all BTRS) takes 3.1 us per call,
// uniform or skewed (~50 ns per binomial); sample_local_expert_counts (14 experts, R=8192) 0.75 us.
// The same 63 draws with std::binomial_distribution (libstdc++) took 13 us: its per-call setup is
// what BTRS avoids, hence the hand-written binomial below (which also makes the draws independent
// of the standard library's implementation).
#include "graph/routing.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <utility>

namespace moesim {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // 2^64 / golden ratio, splitmix64's increment

// splitmix64's output function (Steele, Lea & Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): a bijection on 64-bit words with full avalanche.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// What a generator stream is for, so that two uses of the same (step, layer, ...) never share
// draws.
enum class Stream : int64_t {
  send_counts = 1, local_expert_counts = 2, expert_permutation = 3, group_loads = 4, capacity = 5, tokens = 6,
  group_copies = 7
};

// The key of a stream: each field is added to the running hash, which is then mixed. Because mix64
// is a bijection, tuples with a common prefix that differ in the next field always get different
// states; other collisions are as likely as for random 64-bit words.
uint64_t stream_key(std::initializer_list<int64_t> fields) {
  uint64_t h = 0x6d6f6573696d2072ULL;  // "moesim r"
  for (int64_t f : fields) h = mix64(h + kGolden + static_cast<uint64_t>(f));
  return h;
}

// xoshiro256** 1.0 (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2018):
// four words of state, a few shifts per draw, passes BigCrush. Seeded from a splitmix64 sequence
// as its authors recommend, which also makes the all-zero state impossible. Construction costs a
// handful of multiplies, unlike mt19937's 2.5 KB state. A UniformRandomBitGenerator.
class Xoshiro256 {
 public:
  using result_type = uint64_t;

  explicit Xoshiro256(uint64_t key) {
    for (uint64_t& word : s_) {
      key += kGolden;
      word = mix64(key);
    }
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<uint64_t>::max(); }

  result_type operator()() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform on the open interval (0, 1): the 2^53-point grid shifted by half a step, so that
  // log(u) and 1/(0.5 - |u - 0.5|) below are always finite.
  double uniform() { return (static_cast<double>((*this)() >> 11) + 0.5) * 0x1.0p-53; }

  // Uniform integer in [0, bound), unbiased: draws below 2^64 mod bound are rejected so that every
  // residue has the same number of preimages.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const uint64_t x = (*this)();
      if (x >= threshold) return x % bound;
    }
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  std::array<uint64_t, 4> s_;
};

// fc(k) = log(k!) - (k + 1/2) log(k + 1) + (k + 1) - log(sqrt(2 pi)): the error of Stirling's
// formula at k + 1. Exact values below 10 (computed with long double lgamma); above, the series
// 1/(12x) - 1/(360x^3) + 1/(1260x^5) with x = k + 1, whose truncation error is below 1/(1680x^7),
// 3e-11 at x = 11, which moves an acceptance probability by that relative amount.
double stirling_tail(double k) {
  static constexpr std::array<double, 10> kExact = {
      0.081061466795327258, 0.041340695955409294, 0.027677925684998339, 0.020790672103765093,
      0.016644691189821192, 0.013876128823070748, 0.01189670994589177,  0.010411265261972097,
      0.0092554621827127317, 0.0083305634333628723};
  if (k < 10) return kExact[static_cast<size_t>(k)];
  const double x = k + 1;
  const double x2 = x * x;
  return (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / x2) / x2) / x;
}

// Binomial(n, p) for p <= 1/2 and n*p >= 10: BTRS, transformed rejection with squeeze (W. Hörmann,
// "The generation of binomial random variates", J. Statist. Comput. Simul. 46 (1993) 101-110).
// A candidate k comes from a transformed uniform u whose hat dominates the pmf; it is accepted at
// once in the squeeze region (~86% of candidates for large n*p, 2 uniforms and no logs), otherwise
// by comparing log(v * hat) with the exact log(pmf(k)/pmf(m)) through Stirling's formula. The
// constants are the paper's. Exact in distribution up to stirling_tail's 3e-11.
int64_t binomial_btrs(Xoshiro256& rng, int64_t n, double p) {
  const double count = static_cast<double>(n);
  const double spq = std::sqrt(count * p * (1 - p));
  const double b = 1.15 + 2.53 * spq;
  const double a = -0.0873 + 0.0248 * b + 0.01 * p;
  const double c = count * p + 0.5;
  const double v_r = 0.92 - 4.2 / b;
  const double r = p / (1 - p);
  const double alpha = (2.83 + 5.1 / b) * spq;
  const double m = std::floor((count + 1) * p);  // the mode
  for (;;) {
    const double u = rng.uniform() - 0.5;
    double v = rng.uniform();
    const double us = 0.5 - std::fabs(u);
    const double k = std::floor((2 * a / us + b) * u + c);
    if (k < 0 || k > count) continue;  // outside the support: zero mass, reject
    if (us >= 0.07 && v <= v_r) return static_cast<int64_t>(k);
    v = std::log(v * alpha / (a / (us * us) + b));
    const double log_ratio = (m + 0.5) * std::log((m + 1) / (r * (count - m + 1))) +
                             (count + 1) * std::log((count - m + 1) / (count - k + 1)) +
                             (k + 0.5) * std::log(r * (count - k + 1) / (k + 1)) +
                             stirling_tail(m) + stirling_tail(count - m) - stirling_tail(k) -
                             stirling_tail(count - k);
    if (v <= log_ratio) return static_cast<int64_t>(k);
  }
}

// Binomial(n, p) for p <= 1/2 and n*p < 10: inversion by sequential search from 0, using
// pmf(x) = pmf(x-1) * (n-x+1)/x * p/(1-p); expected n*p + 1 steps of a multiply each. pmf(0) =
// (1-p)^n >= e^-14 here, so nothing underflows. The search stops at n*p + 10*sqrt(n*p*(1-p) + 1)
// and redraws beyond it, which conditions on X below that bound; the mass above it is under 1e-14
// (Poisson(10) beyond 43), so the truncation is far below any statistical effect.
int64_t binomial_inversion(Xoshiro256& rng, int64_t n, double p) {
  const double count = static_cast<double>(n);
  const double odds = p / (1 - p);
  const double pmf0 = std::exp(count * std::log1p(-p));
  const double mean = count * p;
  const int64_t bound =
      std::min(n, static_cast<int64_t>(mean + 10 * std::sqrt(mean * (1 - p) + 1)));
  for (;;) {
    double u = rng.uniform();
    double pmf = pmf0;
    int64_t x = 0;
    while (u > pmf && x < bound) {
      u -= pmf;
      ++x;
      pmf *= odds * static_cast<double>(n - x + 1) / static_cast<double>(x);
    }
    if (u <= pmf) return x;
  }
}

// Binomial(n, p), exact in distribution (see the two methods above); p outside (0, 1) is clamped.
int64_t sample_binomial(Xoshiro256& rng, int64_t n, double p) {
  if (n <= 0 || p <= 0) return 0;
  if (p >= 1) return n;
  // Both methods need p <= 1/2; 1 - p is exact for p in [1/2, 1] (Sterbenz).
  const bool flip = p > 0.5;
  const double p_small = flip ? 1 - p : p;
  const int64_t x = static_cast<double>(n) * p_small < 10 ? binomial_inversion(rng, n, p_small)
                                                          : binomial_btrs(rng, n, p_small);
  return flip ? n - x : x;
}

// Multinomial(n, probabilities) given conditional[i] = prob[i] / (prob[i] + ... + prob[last]):
// a binomial per category on what earlier categories left, the last one taking the rest.
void sample_multinomial(Xoshiro256& rng, int64_t n, std::span<const double> conditional,
                        std::span<int64_t> out) {
  assert(out.size() == conditional.size() && !out.empty());
  int64_t left = n;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    out[i] = sample_binomial(rng, left, conditional[i]);
    left -= out[i];
  }
  out.back() = left;
}

// Water-filling of popularity weights under the top-k cap (see the header): returns q with
// sum 1 and k*q_e <= 1.
std::vector<double> capped_probabilities(std::span<const double> weights, int64_t top_k) {
  const size_t num = weights.size();
  assert(num > 0 && top_k >= 1 && static_cast<size_t>(top_k) <= num);
  std::vector<size_t> order(num);
  std::iota(order.begin(), order.end(), size_t{0});
  // Ties broken by index so that the result does not depend on the sort's implementation.
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return weights[x] != weights[y] ? weights[x] > weights[y] : x < y;
  });
  // rest[i] = sum of the i-th largest weight and all smaller ones, summed from the smallest up
  // so that no small weight is lost to rounding.
  std::vector<double> rest(num + 1, 0.0);
  for (size_t i = num; i-- > 0;) rest[i] = rest[i + 1] + weights[order[i]];

  const double cap = 1.0 / static_cast<double>(top_k);
  // Cap the largest weights one by one while the largest uncapped one, scaled to the budget left,
  // would exceed the cap. At most k-1 are capped: with k-1 capped the budget is 1/k, and no weight
  // exceeds 1/k of budget times its share.
  size_t num_capped = 0;
  for (; num_capped + 1 < static_cast<size_t>(top_k); ++num_capped) {
    const double budget = 1.0 - static_cast<double>(num_capped) * cap;
    const double largest = weights[order[num_capped]];
    if (rest[num_capped] <= 0 || budget * largest / rest[num_capped] <= cap) break;
  }
  const double budget = 1.0 - static_cast<double>(num_capped) * cap;
  std::vector<double> q(num, 0.0);
  for (size_t i = 0; i < num; ++i) {
    if (i < num_capped) {
      q[order[i]] = cap;
    } else if (rest[num_capped] > 0) {
      q[order[i]] = budget * weights[order[i]] / rest[num_capped];
    } else {
      // Fewer than k experts have any weight: the others are needed to make up k distinct picks.
      q[order[i]] = budget / static_cast<double>(num - num_capped);
    }
  }
  double total = 0;
  for (size_t i = num; i-- > 0;) total += q[order[i]];
  for (double& x : q) x /= total;
  return q;
}

// conditional[i] = prob[i] / (prob[i] + ... + prob[last]) within one group, the input of
// sample_multinomial. A zero tail gives 0 (nothing is left to place there anyway).
void fill_conditional(std::span<const double> prob, std::span<double> conditional) {
  double tail = 0;
  for (size_t i = prob.size(); i-- > 0;) {
    tail += prob[i];
    conditional[i] = tail > 0 ? std::min(1.0, prob[i] / tail) : 0.0;
  }
}

// Systematic sampling (Madow 1949) over `order`: item order[i] is taken when the running sum of
// inclusion probabilities crosses u + j for an integer j; with every probability <= 1 an item is
// taken at most once and each is taken with exactly its probability. Their sum n (an integer up to
// rounding) is the number taken. Appends the taken items to `out`.
void systematic_sample(Xoshiro256& rng, std::span<const size_t> order, std::span<const double> inclusion,
                       std::vector<size_t>& out) {
  const double u = rng.uniform();
  double before = 0;
  for (size_t i : order) {
    const double after = before + inclusion[i];
    if (std::floor(after - u) > std::floor(before - u)) out.push_back(i);
    before = after;
  }
}

// A uniformly random order of 0..num-1 (Fisher-Yates with our own bounded draw).
void random_order(Xoshiro256& rng, std::vector<size_t>& order, size_t num) {
  order.resize(num);
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i = num; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
}

}  // namespace

RoutingSampler::RoutingSampler(const RoutingSpec& spec, int64_t num_experts, int64_t top_k,
                               int64_t ep, std::vector<double> histogram, int64_t ep_ranks_per_node)
    : spec_(spec),
      distribution_(spec.distribution),
      skew_(spec.skew),
      seed_(spec.seed),
      num_experts_(num_experts),
      top_k_(top_k),
      ep_(ep),
      ranks_per_node_(ep_ranks_per_node > 0 ? ep_ranks_per_node : ep),
      histogram_(std::move(histogram)),
      lazy_tables_(std::make_unique<LazyTables>()) {
  assert(num_experts_ >= 1 && ep_ >= 1 && num_experts_ % ep_ == 0);
  assert(top_k_ >= 1 && top_k_ <= num_experts_);
  assert(skew_ >= 0);
  assert((distribution_ == RoutingDistribution::histogram) ==
         (static_cast<int64_t>(histogram_.size()) == num_experts_));
  assert(std::all_of(histogram_.begin(), histogram_.end(), [](double x) { return x >= 0; }));
  assert(ep_ % ranks_per_node_ == 0);
  // At most one limit is set (the scenario checks); its units.
  if (spec.groups_per_token > 0) {
    limit_units_ = spec.groups;
    limit_per_token_ = spec.groups_per_token;
  } else if (spec.nodes_per_token > 0) {
    limit_units_ = ep_ / ranks_per_node_;
    limit_per_token_ = spec.nodes_per_token;
  } else if (spec.devices_per_token > 0) {
    limit_units_ = ep_;
    limit_per_token_ = spec.devices_per_token;
  }
  assert(num_experts_ % limit_units_ == 0);
  assert(!limited() || limit_per_token_ * (num_experts_ / limit_units_) >= top_k_);
  if (distribution_ != RoutingDistribution::skewed && spec_.bias_update_speed == 0) shared_table_ = build_table(0);
}

int64_t RoutingSampler::units_reached() const { return limited() ? std::min(limit_per_token_, top_k_) : top_k_; }

std::vector<double> RoutingSampler::base_weights(int64_t layer) const {
  const auto num = static_cast<size_t>(num_experts_);
  std::vector<double> weights;
  switch (distribution_) {
    case RoutingDistribution::uniform:
      weights.assign(num, 1.0);
      break;
    case RoutingDistribution::histogram:
      weights = histogram_;
      break;
    case RoutingDistribution::skewed: {
      // expert_by_popularity[i] is the i-th most popular expert. Fisher-Yates with our own bounded
      // draw (std::shuffle's is implementation-defined), so a seed names the same permutation
      // everywhere.
      std::vector<size_t> expert_by_popularity(num);
      std::iota(expert_by_popularity.begin(), expert_by_popularity.end(), size_t{0});
      Xoshiro256 rng(stream_key({seed_, static_cast<int64_t>(Stream::expert_permutation), layer}));
      for (size_t i = num; i > 1; --i) {
        std::swap(expert_by_popularity[i - 1], expert_by_popularity[rng.below(i)]);
      }
      weights.assign(num, 0.0);
      for (size_t i = 0; i < num; ++i) {
        weights[expert_by_popularity[i]] = std::pow(static_cast<double>(i + 1), -skew_);
      }
      break;
    }
  }
  return weights;
}

std::vector<double> RoutingSampler::assignment_probabilities(std::span<const double> weights, LayerTable* t) const {
  std::vector<double> q = capped_probabilities(weights, top_k_);
  if (!limited()) return q;
  // q'_e = W'_u r_e (header): W' the units' shares under the cap 1/M, r the split inside a unit
  // under the cap 1/ceil(k/M).
  const auto units = static_cast<size_t>(limit_units_);
  const auto per_unit = static_cast<size_t>(num_experts_ / limit_units_);
  const int64_t most_in_unit = (top_k_ + limit_per_token_ - 1) / limit_per_token_;
  std::vector<double> unit_weight(units, 0.0);
  for (size_t u = 0; u < units; ++u) {
    for (size_t i = per_unit; i-- > 0;) unit_weight[u] += q[u * per_unit + i];
  }
  std::vector<double> unit_share = capped_probabilities(unit_weight, limit_per_token_);
  std::vector<double> within(q.size(), 0.0);
  for (size_t u = 0; u < units; ++u) {
    const std::span<const double> local(q.data() + u * per_unit, per_unit);
    const std::vector<double> r = capped_probabilities(local, std::min<int64_t>(most_in_unit, static_cast<int64_t>(per_unit)));
    for (size_t i = 0; i < per_unit; ++i) {
      within[u * per_unit + i] = r[i];
      q[u * per_unit + i] = unit_share[u] * r[i];
    }
  }
  if (t) {
    t->unit_fraction = unit_share;
    t->unit_conditional.assign(units, 0.0);
    fill_conditional(unit_share, t->unit_conditional);
    t->within_unit = std::move(within);
  }
  return q;
}

std::vector<double> RoutingSampler::biases_locked(int64_t layer, int64_t sampled_step) const {
  const int64_t step = sampled_step + spec_.bias_start_step;  // updates so far
  const int64_t key = distribution_ == RoutingDistribution::skewed ? layer : 0;
  BiasState& b = lazy_tables_->bias[key];
  if (b.bias.empty() || b.step > step) b = BiasState{0, std::vector<double>(static_cast<size_t>(num_experts_), 0.0)};
  if (b.step == step) return b.bias;
  const std::vector<double> base = base_weights(layer);
  const double target = 1.0 / static_cast<double>(num_experts_);
  const double gamma = spec_.bias_update_speed;
  std::vector<double> weights(base.size());
  for (; b.step < step; ++b.step) {
    for (size_t e = 0; e < base.size(); ++e) weights[e] = base[e] * std::exp(b.bias[e]);
    const std::vector<double> q = assignment_probabilities(weights, nullptr);
    // Sign of the load error; a relative dead band of 1e-9 keeps rounding noise of an already
    // balanced load (uniform routing) from moving the bias.
    for (size_t e = 0; e < base.size(); ++e) {
      if (q[e] > target * (1 + 1e-9)) b.bias[e] -= gamma;
      if (q[e] < target * (1 - 1e-9)) b.bias[e] += gamma;
    }
  }
  return b.bias;
}

std::vector<double> RoutingSampler::expert_biases(int64_t layer, int64_t step) const {
  if (spec_.bias_update_speed == 0) return std::vector<double>(static_cast<size_t>(num_experts_), 0.0);
  const std::lock_guard<std::mutex> lock(lazy_tables_->mutex);
  return biases_locked(layer, step);
}

std::unique_ptr<const RoutingSampler::LayerTable> RoutingSampler::build_table(int64_t layer,
                                                                              std::span<const double> bias) const {
  const auto num = static_cast<size_t>(num_experts_);
  std::vector<double> weights = base_weights(layer);
  for (size_t e = 0; e < bias.size(); ++e) weights[e] *= std::exp(bias[e]);

  auto t = std::make_unique<LayerTable>();
  t->expert_probability = assignment_probabilities(weights, t.get());
  const auto per_rank = static_cast<size_t>(experts_per_rank());
  const auto num_ranks = static_cast<size_t>(ep_);
  t->rank_fraction.assign(num_ranks, 0.0);
  t->local_expert_conditional.assign(num, 0.0);
  for (size_t r = 0; r < num_ranks; ++r) {
    const std::span<const double> local(t->expert_probability.data() + r * per_rank, per_rank);
    for (size_t i = per_rank; i-- > 0;) t->rank_fraction[r] += local[i];
    fill_conditional(local, std::span(t->local_expert_conditional).subspan(r * per_rank, per_rank));
  }
  t->rank_conditional.assign(num_ranks, 0.0);
  fill_conditional(t->rank_fraction, t->rank_conditional);
  return t;
}

const RoutingSampler::LayerTable& RoutingSampler::table(int64_t layer, int64_t step) const {
  if (shared_table_) return *shared_table_;
  if (spec_.bias_update_speed > 0) {
    const int64_t key = distribution_ == RoutingDistribution::skewed ? layer : 0;
    const std::lock_guard<std::mutex> lock(lazy_tables_->mutex);
    auto& slot = lazy_tables_->step_tables[{key, step}];
    if (!slot) slot = build_table(layer, biases_locked(layer, step));
    return *slot;
  }
  if (auto it = warm_tables_.find(layer); it != warm_tables_.end()) return *it->second;
  const std::lock_guard<std::mutex> lock(lazy_tables_->mutex);
  auto& slot = lazy_tables_->tables[layer];
  if (!slot) slot = build_table(layer);
  return *slot;
}

void RoutingSampler::warm(std::span<const int64_t> layers) {
  if (shared_table_ || spec_.bias_update_speed > 0) return;
  for (int64_t layer : layers) {
    auto& slot = warm_tables_[layer];
    if (!slot) slot = build_table(layer);
  }
}

std::span<const double> RoutingSampler::expert_probabilities(int64_t layer, int64_t step) const {
  return table(layer, step).expert_probability;
}

double RoutingSampler::expected_fraction(int64_t layer, int64_t ep_rank, int64_t step) const {
  assert(ep_rank >= 0 && ep_rank < ep_);
  return table(layer, step).rank_fraction[static_cast<size_t>(ep_rank)];
}

int64_t expert_capacity(const RoutingSpec& spec, int64_t num_experts, int64_t top_k, int64_t ep, int64_t tokens) {
  if (!spec.capacity_factor) return -1;
  const auto balanced = static_cast<double>(ep * tokens * top_k) / static_cast<double>(num_experts);
  // The relative 1e-12 keeps rounding from adding a row: 1.1 x 1000 is 1100.0000000000002.
  return static_cast<int64_t>(std::ceil(*spec.capacity_factor * balanced * (1 - 1e-12)));
}

int64_t expected_expert_rows(const RoutingSpec& spec, int64_t num_experts, int64_t top_k, int64_t ep, int64_t tokens) {
  if (spec.capacity_factor && spec.capacity_policy == CapacityPolicy::pad) {
    return num_experts / ep * expert_capacity(spec, num_experts, top_k, ep, tokens);
  }
  return tokens * top_k;
}

int64_t RoutingSampler::expert_capacity(int64_t num_tokens) const {
  return moesim::expert_capacity(spec_, num_experts_, top_k_, ep_, num_tokens);
}

int64_t RoutingSampler::expected_rows(int64_t num_tokens) const {
  return expected_expert_rows(spec_, num_experts_, top_k_, ep_, num_tokens);
}

int64_t RoutingSampler::processed_rows(int64_t step, int64_t layer, int64_t micro, int64_t group_id,
                                       int64_t ep_rank, int64_t num_tokens, int64_t received) const {
  const int64_t capacity = expert_capacity(num_tokens);
  if (capacity < 0) return received;
  if (spec_.capacity_policy == CapacityPolicy::pad) return experts_per_rank() * capacity;
  const LayerTable& t = table(layer, step);
  Xoshiro256 rng(stream_key({seed_, static_cast<int64_t>(Stream::capacity), step, layer, micro, group_id, ep_rank}));
  const auto per_rank = static_cast<size_t>(experts_per_rank());
  const std::span<const double> conditional(
      t.local_expert_conditional.data() + static_cast<size_t>(ep_rank) * per_rank, per_rank);
  std::vector<int64_t> loads(per_rank);
  sample_multinomial(rng, received, conditional, loads);
  int64_t rows = 0;
  for (int64_t load : loads) rows += std::min(load, capacity);
  return rows;
}

std::vector<int32_t> RoutingSampler::sample_tokens(int64_t step, int64_t layer, int64_t stream,
                                                   int64_t num_tokens) const {
  const LayerTable& t = table(layer, step);
  Xoshiro256 rng(stream_key({seed_, static_cast<int64_t>(Stream::tokens), step, layer, stream}));
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(num_tokens * top_k_));
  std::vector<size_t> order, units, taken;
  if (!limited()) {
    // k distinct experts with inclusion k q_e.
    std::vector<double> inclusion(t.expert_probability);
    for (double& x : inclusion) x *= static_cast<double>(top_k_);
    for (int64_t n = 0; n < num_tokens; ++n) {
      random_order(rng, order, inclusion.size());
      taken.clear();
      systematic_sample(rng, order, inclusion, taken);
      for (size_t e : taken) out.push_back(static_cast<int32_t>(e));
    }
    return out;
  }
  const auto num_units = static_cast<size_t>(limit_units_);
  const auto per_unit = static_cast<size_t>(num_experts_ / limit_units_);
  const auto m = static_cast<size_t>(limit_per_token_);
  const auto k = static_cast<size_t>(top_k_);
  std::vector<double> unit_inclusion(t.unit_fraction);
  for (double& x : unit_inclusion) x *= static_cast<double>(m);
  std::vector<double> expert_inclusion(per_unit);
  std::vector<size_t> share;
  for (int64_t n = 0; n < num_tokens; ++n) {
    random_order(rng, order, num_units);
    units.clear();
    systematic_sample(rng, order, unit_inclusion, units);
    // Even split: k / M each, the remainder to a random subset (units is in random order already).
    share.assign(units.size(), k / m);
    for (size_t i = 0; i < k % m && i < units.size(); ++i) ++share[i];
    for (size_t i = 0; i < units.size(); ++i) {
      if (share[i] == 0) continue;
      const size_t u = units[i];
      for (size_t j = 0; j < per_unit; ++j) expert_inclusion[j] = static_cast<double>(share[i]) * t.within_unit[u * per_unit + j];
      random_order(rng, order, per_unit);
      taken.clear();
      systematic_sample(rng, order, expert_inclusion, taken);
      for (size_t j : taken) out.push_back(static_cast<int32_t>(u * per_unit + j));
    }
  }
  return out;
}

void RoutingSampler::sample_group_copies(int64_t step, int64_t layer, int64_t micro, int64_t group_id,
                                         int64_t num_tokens, std::span<int64_t> copies, std::span<int64_t> kept_copies,
                                         std::span<int64_t> received, std::span<int64_t> kept) const {
  assert(dedups_devices() && limit_units_ == ep_);
  assert(static_cast<int64_t>(copies.size()) == ep_ && static_cast<int64_t>(kept_copies.size()) == ep_);
  assert(static_cast<int64_t>(received.size()) == ep_ && static_cast<int64_t>(kept.size()) == ep_);
  const LayerTable& t = table(layer, step);
  Xoshiro256 rng(stream_key(
      {seed_, static_cast<int64_t>(Stream::group_copies), step, layer, micro, group_id}));
  const int64_t reached = units_reached();
  sample_multinomial(rng, ep_ * num_tokens * reached, t.unit_conditional, copies);
  const int64_t base = top_k_ / reached;
  const double extra = static_cast<double>(top_k_ % reached) / static_cast<double>(reached);
  const double from_self = 1.0 / static_cast<double>(ep_);
  for (size_t r = 0; r < copies.size(); ++r) {
    kept_copies[r] = sample_binomial(rng, copies[r], from_self);
    kept[r] = kept_copies[r] * base + sample_binomial(rng, kept_copies[r], extra);
    received[r] = kept[r] + (copies[r] - kept_copies[r]) * base + sample_binomial(rng, copies[r] - kept_copies[r], extra);
  }
}

void RoutingSampler::sample_send_counts(int64_t step, int64_t layer, int64_t micro,
                                        int64_t sender_rank, int64_t num_tokens,
                                        std::span<int64_t> out) const {
  assert(static_cast<int64_t>(out.size()) == ep_);
  assert(num_tokens >= 0);
  const LayerTable& t = table(layer, step);
  Xoshiro256 rng(stream_key(
      {seed_, static_cast<int64_t>(Stream::send_counts), step, layer, micro, sender_rank}));
  sample_multinomial(rng, num_tokens * top_k_, t.rank_conditional, out);
}

void RoutingSampler::sample_local_expert_counts(int64_t step, int64_t layer, int64_t micro,
                                                int64_t receiver_rank, int64_t ep_rank,
                                                int64_t received, std::span<int64_t> out) const {
  assert(static_cast<int64_t>(out.size()) == experts_per_rank());
  assert(ep_rank >= 0 && ep_rank < ep_);
  assert(received >= 0);
  const LayerTable& t = table(layer, step);
  Xoshiro256 rng(stream_key({seed_, static_cast<int64_t>(Stream::local_expert_counts), step, layer,
                             micro, receiver_rank, ep_rank}));
  const auto per_rank = static_cast<size_t>(experts_per_rank());
  const std::span<const double> conditional(
      t.local_expert_conditional.data() + static_cast<size_t>(ep_rank) * per_rank, per_rank);
  sample_multinomial(rng, received, conditional, out);
}

void RoutingSampler::sample_group_loads(int64_t step, int64_t layer, int64_t micro, int64_t group_id,
                                        int64_t num_tokens, std::span<int64_t> received,
                                        std::span<int64_t> kept) const {
  assert(static_cast<int64_t>(received.size()) == ep_ && static_cast<int64_t>(kept.size()) == ep_);
  assert(num_tokens >= 0);
  const LayerTable& t = table(layer, step);
  Xoshiro256 rng(stream_key(
      {seed_, static_cast<int64_t>(Stream::group_loads), step, layer, micro, group_id}));
  sample_multinomial(rng, ep_ * num_tokens * top_k_, t.rank_conditional, received);
  const double from_self = 1.0 / static_cast<double>(ep_);
  for (size_t r = 0; r < received.size(); ++r) kept[r] = sample_binomial(rng, received[r], from_self);
}

}  // namespace moesim
