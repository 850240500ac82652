// SPDX-License-Identifier: MIT
#include "engine/switch_tiers.hpp"

#include <map>

namespace moesim {

SwitchTiers::SwitchTiers(const CostModel& cost, int64_t num_ranks, int32_t first_resource) {
  const HardwareSpec& hw = cost.hardware();
  domain_size_ = hw.fabric.scale_up.domain_size;
  int32_t next = first_resource;
  auto add = [&](std::vector<Tier>& out, const std::vector<SwitchTierSpec>& specs, int64_t base, bool scale_out) {
    int64_t below = base;
    for (const SwitchTierSpec& s : specs) {
      Tier t;
      t.span = s.span;
      t.below = below;
      const double link = static_cast<double>(s.span) * s.bandwidth_per_device.value;
      t.capacity = scale_out ? cost.achievable_scale_out(link) : cost.achievable(link);
      t.first_resource = next;
      next += static_cast<int32_t>((num_ranks + s.span - 1) / s.span);
      out.push_back(t);
      below = s.span;
    }
  };
  add(up_, hw.fabric.scale_up.tiers, 1, false);
  if (hw.fabric.scale_out) add(out_, hw.fabric.scale_out->tiers, domain_size_, true);
  num_resources_ = next - first_resource;
}

void SwitchTiers::add_links(std::span<const int64_t> members, bool direct, bool scale_out, double bandwidth,
                            const std::function<double(int64_t, int64_t)>& participants,
                            std::vector<int32_t>& resources, std::vector<double>& weights) const {
  const auto& tiers = scale_out ? out_ : up_;
  const int64_t base = scale_out ? domain_size_ : 1;
  const auto n = static_cast<double>(members.size());
  std::map<int64_t, int64_t> per_base;
  for (int64_t m : members) ++per_base[m / base];
  for (const Tier& t : tiers) {
    std::map<int64_t, int64_t> per_below;
    for (int64_t m : members) ++per_below[m / t.below];
    const double ring_share = per_below.size() > 1
                                  ? static_cast<double>(per_below.size()) / static_cast<double>(per_base.size())
                                  : 0.0;
    std::map<int64_t, std::pair<double, int64_t>> per_instance;  // crossing share summed, members
    for (int64_t m : members) {
      double f = ring_share;
      if (direct) {
        const double remote = n - static_cast<double>(per_base[m / base]);
        f = remote > 0 ? (n - static_cast<double>(per_below[m / t.below])) / remote : 0.0;
      }
      auto& [share, count] = per_instance[m / t.span];
      share += f;
      ++count;
    }
    for (const auto& [instance, load] : per_instance) {
      if (load.first <= 0) continue;
      const double copies =
          participants ? participants(instance * t.span, t.span) / static_cast<double>(load.second) : 1.0;
      resources.push_back(t.first_resource + static_cast<int32_t>(instance));
      weights.push_back(load.first * bandwidth / t.capacity * copies);
    }
  }
}

}  // namespace moesim
