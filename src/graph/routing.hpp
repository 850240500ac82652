// SPDX-License-Identifier: MIT
// RoutingSampler: how many token-expert assignments each rank sends to each EP peer, and how many
// each local expert receives, in one MoE layer of one micro-batch of one training step.
//
// Use it wherever the op graph needs all-to-all sizes or grouped-GEMM row counts. It draws counts,
// never individual tokens, so a call costs O(ep) or O(experts per rank), independent of the number
// of tokens (~3 us for E=896, k=16, ep=64, T=32768; see routing.cpp).
//
// Expert popularity p_e, per MoE layer, from RoutingSpec:
//   uniform    p_e = 1/E.
//   skewed     Zipf: the i-th most popular expert has p ∝ 1/(i+1)^skew. Which expert is the i-th is
//              a random permutation seeded by (seed, layer), so hot experts land on different EP
//              ranks in different layers, as in trained models. skew = 0 is uniform.
//   histogram  p_e ∝ tokens_per_expert[e], the same for every layer.
//
// The top-k cap. A token picks k *distinct* experts, so expert e can receive at most one of a
// token's k assignments: the probability that one assignment goes to e, q_e, must satisfy
// k*q_e <= 1. q is p water-filled under that cap: cap the largest p_e at 1/k, spread what is left
// over the others in proportion to p, repeat while the largest of the others exceeds the cap; then
// normalise to sum 1. Worked example, E=4, k=2, ep=2, p = (0.55, 0.25, 0.15, 0.05): 0.55 > 1/2 is
// capped to 0.5, the remaining 0.5 goes to the rest in proportion 25:15:5, so
// q = (0.5, 0.2778, 0.1667, 0.0556). EP rank 0 holds experts 0-1, rank 1 experts 2-3, so
// Q_0 = 0.7778 and Q_1 = 0.2222: a sender with T=1000 tokens (n=2000 assignments) sends rank 0 on
// average 1555.6 of them. If fewer than k experts have p_e > 0 (a histogram with zeros), the mass
// left after capping them is spread evenly over the zero-popularity experts: a token still needs k
// distinct experts.
//
// Approximation: the n = T*k assignments of a sender are drawn as n independent draws over experts
// with probabilities q (q is exactly the per-assignment marginal of top-k selection). This ignores
// the negative correlation that distinctness puts between one token's k picks. Means are exact;
// variances are slightly overstated: for uniform routing the per-peer count variance of real
// distinct top-k is n*Q*(1-Q)*(E-k)/(E-1), 1.7% below the multinomial's for E=896, k=16. Tokens
// are independent of each other (no per-sequence or per-document routing correlation).
//
// Limited routing (routing.groups_per_token, nodes_per_token, devices_per_token). The experts form
// U equal units of consecutive experts: the router's groups (DeepSeek-V3's n_group), the scale-up
// domains of the EP group (EP ranks in blocks of ep_ranks_per_node), or the EP ranks. A token's
// experts lie on at most M units (M >= U is no limit). The token model, which sample_tokens() draws
// literally:
//   1. the token picks M distinct units, unit u with inclusion probability pi_u = M * W'_u, where
//      W_u = sum of q_e over u's experts and W' is W water-filled under the cap 1/M (as q is under
//      1/k above); drawn by systematic sampling over a random order of the units, which realises
//      exactly these inclusion probabilities;
//   2. its k assignments are split as evenly as possible over the M units (k/M each; the k mod M
//      extra ones to uniformly chosen units; with M > k, k of them get one each), so a token
//      reaches min(M, k) units. DeepSeek-V3 scores a node by the sum of its top k/M affinities,
//      which favours such even splits; real top-k among the chosen units' experts is not exactly
//      even;
//   3. in a unit with a assignments the token takes a distinct experts, expert e with inclusion
//      a * r_e, r = q restricted to u and water-filled under the cap 1/ceil(k/M).
// The per-assignment marginal of expert e in unit u is then exactly q'_e = W'_u * r_e, and the
// count draws below use q' for q: exact means, the same independence approximation as above (a
// token's units and experts are drawn as if independent). Under uniform routing q' = q = 1/E:
// limits move bytes, not mean loads. Under skew, the cap 1/M on W' bounds a hot unit's share of
// the load: a unit cannot hold more than k/M of one token's assignments.
// Device-limited routing also dedups the dispatch: a token is sent once per destination EP rank
// (DeepSeek-V2, arXiv 2405.04434, sections 2.2.2-2.2.3: a token's communication is proportional
// to the devices its experts cover, and each device sends at most M T hidden states), so
// sample_group_copies() draws token copies per rank, Multinomial(ep*T*min(M,k), W'), and the
// assignments each copy carries.
//
// Capacity (routing.capacity_factor c). Per expert and micro-batch of one layer the capacity is
// C = ceil(c * ep * T * k / E): the balanced share of everything the EP group's ep members send
// (T tokens each), so the drop decision is made over the group's counts (the counts exchange an
// all-to-all-v does anyway; DeepSeek-V2 section 2.2.4 drops per device against its average
// budget, at capacity factor 1.0). drop: expert e processes min(load_e, C) of its load_e arrivals, the per-expert loads
// drawn as sample_local_expert_counts does; pad: every expert processes exactly C rows (its
// arrivals up to C and zero padding). Which assignments are dropped is not modelled, only how many.
//
// Bias balancing (routing.bias_update_speed gamma; DeepSeek-V3's auxiliary-loss-free balancing,
// arXiv 2412.19437 section 2.1.2).
// Each expert has a bias b_e, 0 at sampled step 0. At step t the router's popularity weights are
// w_e * exp(b_e(t)): a bias is read as a shift of a softmax/Gumbel router's logit, which multiplies
// the popularity by e^b (DeepSeek-V3 adds b to sigmoid affinities before top-k; that mapping is
// monotone but not exactly exponential). After each step b_e += gamma * sign(1/E - q'_e(t)): the
// update is iterated on the expected loads q', not on the sampled counts, so the trajectory is
// deterministic and the same for every EP group. From a skewed start the loads converge to within
// a band set by gamma (DeepSeek-V3 used gamma = 0.001 on its sigmoid scores). Sampled step s has
// had bias_start_step + s updates.
//
// Sampling, exact for that multinomial. With experts split contiguously over the EP group (EP rank
// r holds experts [r*E/ep, (r+1)*E/ep)), let Q_r = sum of q_e over r's experts.
//   Send counts: (c_0, ..., c_{ep-1}) ~ Multinomial(n, Q_0..Q_{ep-1}), drawn as conditional
//   binomials: c_r ~ Binomial(n - c_0 - ... - c_{r-1}, Q_r / (Q_r + ... + Q_{ep-1})), and the last
//   rank takes what is left. This is the chain rule of the multinomial, not an approximation.
//   Local expert counts: a receiver gets R = sum over senders of c_r. Given the per-rank totals,
//   each sender's assignments to rank r are split over r's experts as Multinomial(c_r, q_e/Q_r);
//   a sum of independent multinomials with equal probabilities is a multinomial, so R splits as
//   Multinomial(R, q_e/Q_r), drawn with the same conditional binomials. The two draws are made
//   independently, which is exact because the split over experts, given R, does not depend on
//   how R was composed from the senders.
//   Binomials are Hörmann's BTRS (transformed rejection with squeeze) for n*min(p,1-p) >= 10 and
//   inversion below that; both are exact in distribution up to ~1e-11 (see routing.cpp).
//
// Determinism: every draw comes from a generator whose state is a hash of (seed, purpose, step,
// layer, micro, rank) and nothing else, so the same arguments give the same counts in any call
// order and on any thread. The numbers depend on libm's log/exp/sqrt only through rare
// accept/reject decisions, so another platform's libm may change an occasional draw.
//
// Thread safety: const member functions may be called concurrently. Tables of layers passed to
// warm() are read without locking; other layers (skewed routing only) are built on first use
// under a mutex and cached. warm() must not run concurrently with anything else.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "scenario/scenario_spec.hpp"

namespace moesim {

// Expert capacity C per expert and micro-batch of `tokens` tokens per EP rank (see above); -1:
// dropless (no capacity_factor).
int64_t expert_capacity(const RoutingSpec& spec, int64_t num_experts, int64_t top_k, int64_t ep, int64_t tokens);

// The rows an EP rank's experts hold per micro-batch in expectation, which sizes the graph's
// expert-side buffers and GEMMs: the T k assignments, or under capacity padding E/ep x C whatever
// the loads (the padding is computed and kept like real rows).
int64_t expected_expert_rows(const RoutingSpec& spec, int64_t num_experts, int64_t top_k, int64_t ep, int64_t tokens);

class RoutingSampler {
 public:
  // histogram: tokens per expert when spec.distribution is histogram, else empty. The arguments
  // were checked by the scenario loader (E % ep == 0, 1 <= top_k <= E, histogram of length E,
  // non-negative and not all zero); violations are programming errors and are asserted.
  // ep_ranks_per_node: EP ranks per scale-up domain when the EP group spans domains in equal
  // consecutive blocks (node-limited routing's units); 0: the whole group in one domain.
  RoutingSampler(const RoutingSpec& spec, int64_t num_experts, int64_t top_k, int64_t ep,
                 std::vector<double> histogram, int64_t ep_ranks_per_node = 0);

  const RoutingSpec& spec() const { return spec_; }
  std::span<const double> histogram() const { return histogram_; }
  int64_t num_experts() const { return num_experts_; }
  int64_t top_k() const { return top_k_; }
  int64_t ep() const { return ep_; }
  int64_t experts_per_rank() const { return num_experts_ / ep_; }
  int64_t ep_ranks_per_node() const { return ranks_per_node_; }

  // Limited routing (see above): U units, at most M per token; limited() when 0 < M < U.
  int64_t limit_units() const { return limit_units_; }
  int64_t limit_per_token() const { return limit_per_token_; }
  bool limited() const { return limit_per_token_ > 0 && limit_per_token_ < limit_units_; }
  // Device-limited: the dispatch sends a token once per destination EP rank.
  bool dedups_devices() const { return limited() && spec_.devices_per_token > 0; }
  // Units a token's assignments reach: min(M, k) when limited.
  int64_t units_reached() const;

  // expert_capacity and expected_expert_rows (above) of this sampler's routing.
  int64_t expert_capacity(int64_t num_tokens) const;
  int64_t expected_rows(int64_t num_tokens) const;
  // Rows the experts of EP rank `ep_rank` of group `group_id` process when `received` assignments
  // arrive: received when dropless, sum over its experts of min(load_e, C) (drop), or
  // experts_per_rank() * C (pad).
  int64_t processed_rows(int64_t step, int64_t layer, int64_t micro, int64_t group_id, int64_t ep_rank,
                         int64_t num_tokens, int64_t received) const;

  // Per-assignment probabilities q_e (q' when limited) of MoE layer `layer` (any int64 id; callers
  // pass the 1-based model layer) at sampled step `step` (it matters with bias balancing only).
  // Sums to 1; k*q_e <= 1. The span lives as long as the sampler.
  std::span<const double> expert_probabilities(int64_t layer, int64_t step = 0) const;
  // Bias balancing's biases b_e of `layer` at sampled step `step` (all 0 without it).
  std::vector<double> expert_biases(int64_t layer, int64_t step) const;
  // Precomputes the per-layer tables of step 0, so that later reads of these layers take no lock.
  void warm(std::span<const int64_t> layers);

  // The token model itself (tests, docs): num_tokens tokens' expert ids, top_k() per token,
  // drawn from stream `stream` as the header describes. O(E) per token.
  std::vector<int32_t> sample_tokens(int64_t step, int64_t layer, int64_t stream, int64_t num_tokens) const;

  // The num_tokens*top_k assignments of `sender_rank` split over the EP ranks: out.size() == ep(),
  // out[r] >= 0, sum of out == num_tokens*top_k.
  void sample_send_counts(int64_t step, int64_t layer, int64_t micro, int64_t sender_rank,
                          int64_t num_tokens, std::span<int64_t> out) const;
  // `received` assignments arriving at EP rank `ep_rank` (global rank `receiver_rank`) split over
  // its local experts: out.size() == experts_per_rank(), out[i] >= 0, sum of out == received;
  // out[i] belongs to expert ep_rank*experts_per_rank() + i.
  void sample_local_expert_counts(int64_t step, int64_t layer, int64_t micro,
                                  int64_t receiver_rank, int64_t ep_rank, int64_t received,
                                  std::span<int64_t> out) const;

  // One EP group's loads in one layer and micro-batch, each of its ep() members sending
  // num_tokens*top_k assignments, at the cost of 2*ep binomials instead of the ep^2 of calling
  // sample_send_counts for every member:
  //   received[r]  assignments arriving at EP rank r. The members' send counts are independent
  //                multinomials with the same probabilities Q, so their sum is
  //                Multinomial(ep*n, Q): exact, jointly over r.
  //   kept[r]      of those, the ones r sent to itself (they never cross the fabric). Given
  //                received[r], each arrival came from any of the ep senders with equal
  //                probability (all draw n times with the same Q_r), so kept[r] ~
  //                Binomial(received[r], 1/ep): exact for each r. Drawn independently across r,
  //                which ignores the weak negative correlation that a sender's counts summing to
  //                n puts between them.
  // A member's traffic off the rank is then n - kept[r] sent and received[r] - kept[r] received.
  // `group_id` names the group (its first global rank) in the generator's key.
  void sample_group_loads(int64_t step, int64_t layer, int64_t micro, int64_t group_id, int64_t num_tokens,
                          std::span<int64_t> received, std::span<int64_t> kept) const;

  // Device-limited routing (dedups_devices()): the group's token copies instead of assignments.
  // copies[r] copies (one per token and destination rank) arrive at EP rank r, kept_copies[r] of
  // them from r itself (Binomial(copies[r], 1/ep) as above); received[r] and kept[r] are the
  // assignments they carry (k/min(M,k) per copy on average: floor of it, plus one with the
  // remainder's probability). A member sends num_tokens*units_reached() copies.
  void sample_group_copies(int64_t step, int64_t layer, int64_t micro, int64_t group_id, int64_t num_tokens,
                           std::span<int64_t> copies, std::span<int64_t> kept_copies, std::span<int64_t> received,
                           std::span<int64_t> kept) const;

  // Expected fraction of a sender's assignments that go to EP rank `ep_rank` (Q_r).
  double expected_fraction(int64_t layer, int64_t ep_rank, int64_t step = 0) const;

 private:
  // Everything sampling needs for one layer's q.
  struct LayerTable {
    std::vector<double> expert_probability;       // q_e, size E
    std::vector<double> rank_fraction;            // Q_r, size ep
    std::vector<double> rank_conditional;         // Q_r / (Q_r + ... + Q_{ep-1})
    std::vector<double> local_expert_conditional;  // q_e / (q_e + ... + q_last of e's rank)
    std::vector<double> unit_fraction;             // limited: W'_u, size U
    std::vector<double> unit_conditional;          // limited: W'_u / (W'_u + ... + W'_last)
    std::vector<double> within_unit;               // limited: r_e, size E
  };
  // Bias balancing's state for one layer: the biases after `step` updates.
  struct BiasState {
    int64_t step = 0;
    std::vector<double> bias;
  };
  // Layers (and, with bias balancing, steps) first used without warm(); entries are never
  // removed, so references into them stay valid. With bias balancing a table per (layer, step)
  // is kept: 2E+2ep doubles each, ~15 KB for E=896.
  struct LazyTables {
    std::mutex mutex;
    std::unordered_map<int64_t, std::unique_ptr<const LayerTable>> tables;
    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<const LayerTable>> step_tables;
    std::unordered_map<int64_t, BiasState> bias;
  };

  const LayerTable& table(int64_t layer, int64_t step = 0) const;
  std::unique_ptr<const LayerTable> build_table(int64_t layer, std::span<const double> bias = {}) const;
  // The layer's popularity weights before bias and caps.
  std::vector<double> base_weights(int64_t layer) const;
  // q' from weights (caps, limit), filling the limited fields of t when given.
  std::vector<double> assignment_probabilities(std::span<const double> weights, LayerTable* t) const;
  // Biases after `step` updates; the caller holds lazy_tables_->mutex.
  std::vector<double> biases_locked(int64_t layer, int64_t step) const;

  RoutingSpec spec_;  // as given, for export
  RoutingDistribution distribution_;
  double skew_;
  int64_t seed_;
  int64_t num_experts_;
  int64_t top_k_;
  int64_t ep_;
  int64_t ranks_per_node_;
  int64_t limit_units_ = 1;
  int64_t limit_per_token_ = 0;
  std::vector<double> histogram_;
  std::unique_ptr<const LayerTable> shared_table_;  // uniform and histogram: one for all layers
  std::unordered_map<int64_t, std::unique_ptr<const LayerTable>> warm_tables_;  // skewed
  std::unique_ptr<LazyTables> lazy_tables_;  // skewed; a pointer keeps the sampler movable
};

}  // namespace moesim
