// SPDX-License-Identifier: MIT
#include "search/ranking.hpp"

#include <algorithm>

namespace moesim {

bool ranks_before(const RankedPoint& a, const RankedPoint& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
  return a.index < b.index;
}

void TopN::add(const RankedPoint& p) {
  if (capacity_ <= 0) return;
  if (static_cast<int64_t>(points_.size()) == capacity_ && !ranks_before(p, points_.back())) return;
  points_.insert(std::upper_bound(points_.begin(), points_.end(), p, ranks_before), p);
  if (static_cast<int64_t>(points_.size()) > capacity_) points_.pop_back();
}

void ParetoFront::add(const RankedPoint& p) {
  // Points are kept sorted by step time, and then strictly decreasing in peak HBM; p is dominated
  // when the last kept point at most as slow as p is also at most as large.
  auto after = std::upper_bound(points_.begin(), points_.end(), p.step_time_s,
                                [](double t, const RankedPoint& q) { return t < q.step_time_s; });
  if (after != points_.begin() && std::prev(after)->peak_hbm_bytes <= p.peak_hbm_bytes) return;
  // p now dominates the points from `after`'s equals onward that are no smaller than it.
  auto first = std::lower_bound(points_.begin(), points_.end(), p.step_time_s,
                                [](const RankedPoint& q, double t) { return q.step_time_s < t; });
  auto last = first;
  while (last != points_.end() && last->peak_hbm_bytes >= p.peak_hbm_bytes) ++last;
  points_.insert(points_.erase(first, last), p);
}

}  // namespace moesim
