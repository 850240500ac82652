// SPDX-License-Identifier: MIT
// Switch tiers as shared resources: which switch instances a transfer crosses, and what share of
// each it takes.
//
// A tier of span s groups devices [i*s, (i+1)*s) under one switch instance i of capacity
// s x bandwidth_per_device (each way), times the collective efficiency like the ports. Traffic of a
// member m crosses tier t when it leaves m's instance of the tier below (for the first scale-up
// tier: the device; for the first scale-out tier: the scale-up domain, since all NIC traffic
// leaves it). The fraction f_t(m) of m's traffic that does so depends on the pattern:
//   direct (all-to-all, send/recv): traffic spread evenly over the peers reached through this
//     port, so f_t(m) = (|G| - |G in below_t(m)|) / (|G| - |G in base(m)|), base = device or domain;
//   ring (all-gather, reduce-scatter, all-reduce; NCCL orders rings to cross each boundary once):
//     a ring over k instances of the tier below crosses their boundaries k times (none if k = 1),
//     so on average f_t = k_below / k_base per member.
// A flow at rate r (a fraction of its full per-member bandwidth B) then loads switch instance I
// with r x B x sum over members m in I of f_t(m); its weight on I is that sum x B / capacity(I).
// When one flow stands for several lockstep groups (the engine's distinct_ranks mode), the weight
// is multiplied by how many groups of the same classes meet I: the ranks of those classes in I over
// the flow's members in I.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "cost/cost_model.hpp"

namespace moesim {

class SwitchTiers {
 public:
  // Resources are numbered from `first_resource` on, tier by tier (scale-up tiers first).
  SwitchTiers(const CostModel& cost, int64_t num_ranks, int32_t first_resource);

  int32_t num_resources() const { return num_resources_; }

  // Appends (resource, weight) for a flow among `members` (ranks, ascending or not) on the
  // scale-up fabric or the scale-out one, of full per-member bandwidth `bandwidth`.
  // `multiplicity(first, span)`, when given, returns how many lockstep copies of the flow meet the
  // switch instance holding ranks [first, first + span) (see above); otherwise 1.
  void add_links(std::span<const int64_t> members, bool direct, bool scale_out, double bandwidth,
                 const std::function<double(int64_t, int64_t)>& multiplicity,
                 std::vector<int32_t>& resources, std::vector<double>& weights) const;

 private:
  struct Tier {
    int64_t span = 1;
    int64_t below = 1;   // span of the tier below (or the base: 1 device, or the domain)
    double capacity = 0;  // bytes/s achievable through one instance, each way
    int32_t first_resource = 0;
  };
  std::vector<Tier> up_, out_;
  int64_t domain_size_ = 1;
  int32_t num_resources_ = 0;
};

}  // namespace moesim
