// SPDX-License-Identifier: MIT
#include "engine/max_min.hpp"

#include <algorithm>
#include <unordered_map>

namespace moesim {

void MaxMinSharing::reset(size_t num_resources) {
  flows_.clear();
  flow_stamp_.clear();
  capacity_.assign(num_resources, 1.0);
  unfixed_.assign(num_resources, 0);
  weight_.assign(num_resources, 0);
  on_resource_.assign(num_resources, {});
  resource_stamp_.assign(num_resources, 0);
  stamp_ = 0;
  component_.clear();
  touched_.clear();
  seeds_.clear();
  fresh_.clear();
  pending_ = false;
}

void MaxMinSharing::add(uint32_t id, const std::vector<int32_t>& resources, const std::vector<double>& weights) {
  if (id >= flows_.size()) {
    flows_.resize(id + 1);
    flow_stamp_.resize(id + 1, 0);
  }
  Flow& f = flows_[id];
  f.active = true;
  f.rate = 0;
  f.resources.assign(resources.begin(), resources.end());
  f.weights.assign(weights.begin(), weights.end());
  for (size_t k = 0; k < f.resources.size(); ++k) {
    on_resource_[static_cast<size_t>(f.resources[k])].push_back(id);
    weight_[static_cast<size_t>(f.resources[k])] += f.weights[k];
  }
  seeds_.insert(seeds_.end(), f.resources.begin(), f.resources.end());
  if (f.resources.empty()) fresh_.push_back(id);
  pending_ = true;
}

void MaxMinSharing::remove(uint32_t id) {
  Flow& f = flows_[id];
  f.active = false;
  for (size_t k = 0; k < f.resources.size(); ++k) {
    auto& v = on_resource_[static_cast<size_t>(f.resources[k])];
    v.erase(std::find(v.begin(), v.end(), id));
    weight_[static_cast<size_t>(f.resources[k])] -= f.weights[k];
  }
  seeds_.insert(seeds_.end(), f.resources.begin(), f.resources.end());
  pending_ = true;
}

const std::vector<uint32_t>& MaxMinSharing::affected() {
  if (pending_) collect_component();
  return component_;
}

// The flows on the resources of the pending adds and removes and those connected to them through
// binding resources; a flow added on no resource belongs to it while it is active.
void MaxMinSharing::collect_component() {
  ++stamp_;
  component_.clear();
  touched_.clear();
  for (uint32_t id : fresh_) {
    if (flows_[id].active && flows_[id].resources.empty() && flow_stamp_[id] != stamp_) {
      flow_stamp_[id] = stamp_;
      component_.push_back(id);
    }
  }
  std::vector<int32_t>& work = work_;  // scratch kept across calls: no allocation per event
  work.clear();
  for (int32_t r : seeds_) {
    if (resource_stamp_[static_cast<size_t>(r)] == stamp_) continue;
    resource_stamp_[static_cast<size_t>(r)] = stamp_;
    work.push_back(r);
  }
  seeds_.clear();
  fresh_.clear();
  pending_ = false;
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    if (binding(r)) touched_.push_back(r);
    for (uint32_t id : on_resource_[static_cast<size_t>(r)]) {
      if (flow_stamp_[id] == stamp_) continue;
      flow_stamp_[id] = stamp_;
      component_.push_back(id);
      for (int32_t q : flows_[id].resources) {
        if (resource_stamp_[static_cast<size_t>(q)] == stamp_ || !binding(q)) continue;
        resource_stamp_[static_cast<size_t>(q)] = stamp_;
        work.push_back(q);
      }
    }
  }
}

void MaxMinSharing::share() {
  if (pending_) collect_component();
  for (uint32_t id : component_) {
    Flow& f = flows_[id];
    f.rate = f.resources.empty() ? 1.0 : -1.0;  // -1: not fixed yet
  }
  for (int32_t r : touched_) capacity_[static_cast<size_t>(r)] = 1.0;
  for (int32_t r : touched_) unfixed_[static_cast<size_t>(r)] = 0;
  for (uint32_t id : component_) {
    const Flow& f = flows_[id];
    for (size_t k = 0; k < f.resources.size(); ++k) unfixed_[static_cast<size_t>(f.resources[k])] += f.weights[k];
  }
  size_t left = component_.size();
  for (uint32_t id : component_) left -= flows_[id].rate >= 0 ? 1 : 0;
  std::vector<int32_t>& open = open_;  // binding resources with unfixed flows, shrinking
  open.assign(touched_.begin(), touched_.end());
  while (left > 0) {
    int32_t best = -1;
    double share = 1.0;  // no flow runs faster than alone
    size_t kept = 0;
    for (int32_t r : open) {
      const double w = unfixed_[static_cast<size_t>(r)];
      if (w <= 1e-12) continue;  // all its flows are fixed: drop it from the scan
      open[kept++] = r;
      if (capacity_[static_cast<size_t>(r)] / w < share) {
        share = capacity_[static_cast<size_t>(r)] / w;
        best = r;
      }
    }
    open.resize(kept);
    auto fix = [&](uint32_t id) {
      Flow& f = flows_[id];
      if (f.rate >= 0) return;
      f.rate = std::max(share, 1e-9);
      --left;
      for (size_t k = 0; k < f.resources.size(); ++k) {
        capacity_[static_cast<size_t>(f.resources[k])] -= share * f.weights[k];
        unfixed_[static_cast<size_t>(f.resources[k])] -= f.weights[k];
      }
    };
    if (best < 0) {
      for (uint32_t id : component_) fix(id);  // every resource has room: all the rest run alone
      continue;
    }
    // Every resource at the smallest share is a bottleneck at that share (fixing one's flows
    // leaves the others' share unchanged): fix them all in this pass.
    const double tie = share * (1 + 1e-12);
    for (int32_t r : open) {
      const double w = unfixed_[static_cast<size_t>(r)];
      if (w > 1e-12 && capacity_[static_cast<size_t>(r)] / w <= tie) {
        for (uint32_t id : on_resource_[static_cast<size_t>(r)]) fix(id);
      }
    }
  }
}

void MaxMinSharing::check(int64_t& checks, int64_t& violations) const {
  constexpr double tol = 1e-9;
  std::unordered_map<int32_t, std::pair<double, double>> load_of;  // load, fastest flow
  for (int32_t r : touched_) {
    auto& [load, fastest] = load_of[r];
    for (uint32_t id : on_resource_[static_cast<size_t>(r)]) {
      const Flow& f = flows_[id];
      for (size_t k = 0; k < f.resources.size(); ++k) {
        if (f.resources[k] == r) load += f.rate * f.weights[k];
      }
      fastest = std::max(fastest, f.rate);
    }
    if (load > 1 + tol) ++violations;
  }
  for (uint32_t id : component_) {
    const Flow& f = flows_[id];
    ++checks;
    if (f.rate >= 1 - tol) continue;
    bool bottlenecked = false;
    for (int32_t r : f.resources) {
      auto it = load_of.find(r);
      if (it == load_of.end()) continue;
      const auto& [load, fastest] = it->second;
      if (load >= 1 - tol && f.rate >= fastest - tol) bottlenecked = true;
    }
    if (!bottlenecked) ++violations;
  }
}

}  // namespace moesim
