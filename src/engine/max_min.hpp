// SPDX-License-Identifier: MIT
// Weighted max-min fair sharing of resources among flows (SimGrid's "maxmin" model), kept
// incrementally as flows start and end.
//
// Every resource has capacity 1 (its full bandwidth). A flow f crosses resources r with weights
// w_fr: running at rate x_f (a fraction of its full speed, 0 < x_f <= 1), it takes x_f * w_fr of
// r. Rates are max-min fair: no resource carries more than 1, and no flow can go faster without
// slowing a flow that is not faster than it. Progressive filling finds them: each resource's fair
// share is its remaining capacity over the summed weight of its unfixed flows; repeatedly, the
// resource with the smallest share (capped at 1: no flow runs faster than alone) fixes all its
// unfixed flows at that rate, and rate x weight is taken from every other resource they cross.
//
// Worked example: flows A (weight 1 on r1) and B (weight 1 on r1, weight 1 on r2) and C (weight 2
// on r2). Shares: r1 = 1/2, r2 = 1/3. r2 is the bottleneck: B and C get 1/3, r1 keeps 2/3 for A,
// whose share is then 2/3. Rates: A 2/3, B 1/3, C 1/3 (r2 carries 1/3 + 2/3 = 1, r1 carries 1).
//
// Incrementality: a resource can bind only when its flows together could exceed it at full rate
// (summed weight > 1); one that cannot never limits a rate, so it neither joins the problem nor
// connects flows. Adding or removing a flow re-solves only the flows connected to its resources
// through binding ones (the component); the others' rates cannot change. Several adds and
// removes before one share() re-solve the union of their components once: the engine shares once
// per instant, whatever number of transfers start and end in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moesim {

class MaxMinSharing {
 public:
  // Forgets every flow; `num_resources` resources of capacity 1.
  void reset(size_t num_resources);

  // Flow `id` (any small integer the caller manages) starts on `resources` with `weights` (one
  // per resource, its share of it at full rate). A flow on no resource runs at rate 1. Its rate
  // is 0 until the next share().
  void add(uint32_t id, const std::vector<int32_t>& resources, const std::vector<double>& weights);
  // Flow `id` ends. An id may be added again once removed.
  void remove(uint32_t id);

  // The active flows whose rate may change by the adds and removes since the last share(),
  // their rates still the old ones (so the caller can account the work done at them); then
  // share() fixes their new rates. Empty when nothing was added or removed.
  const std::vector<uint32_t>& affected();
  void share();
  // Whether flows were added or removed since their component was last collected.
  bool pending() const { return pending_; }

  double rate(uint32_t id) const { return flows_[id].rate; }

  // Verifies the last share() against the definition (tests): counts the flows checked and the
  // violations (a resource over capacity, or a flow below 1 with no saturated resource on which
  // it is among the fastest).
  void check(int64_t& checks, int64_t& violations) const;

 private:
  struct Flow {
    bool active = false;
    double rate = 0;
    std::vector<int32_t> resources;
    std::vector<double> weights;
  };

  bool binding(int32_t r) const { return weight_[static_cast<size_t>(r)] > 1 + 1e-12; }
  void collect_component();

  std::vector<Flow> flows_;
  std::vector<double> capacity_;  // remaining, while solving
  std::vector<double> unfixed_;   // summed weight of the flows not fixed yet, while solving
  std::vector<double> weight_;    // summed weight of the active flows
  std::vector<std::vector<uint32_t>> on_resource_;  // active flows crossing each resource
  std::vector<uint64_t> resource_stamp_, flow_stamp_;  // visited marks of the component search
  uint64_t stamp_ = 0;
  std::vector<int32_t> seeds_;       // resources of the adds and removes not shared yet
  std::vector<uint32_t> fresh_;      // flows added on no resource, not shared yet
  bool pending_ = false;             // adds or removes since the component was last collected
  std::vector<uint32_t> component_;  // flows to re-solve
  std::vector<int32_t> touched_;     // binding resources of the component
  std::vector<int32_t> open_;        // scratch of share()
  std::vector<int32_t> work_;        // scratch of collect_component()
};

}  // namespace moesim
