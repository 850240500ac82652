// SPDX-License-Identifier: MIT
// Ranking and the Pareto front on hand examples: what survives, in what order, whatever the
// order points arrive in.
#include <doctest/doctest.h>

#include <algorithm>

#include "search/ranking.hpp"

using namespace moesim;

namespace {

RankedPoint pt(int64_t index, double t, double m, bool fits = true) {
  RankedPoint p;
  p.index = index;
  p.step_time_s = t;
  p.peak_hbm_bytes = m;
  p.fits = fits;
  return p;
}

std::vector<int64_t> indices(const std::vector<RankedPoint>& v) {
  std::vector<int64_t> out;
  for (const auto& p : v) out.push_back(p.index);
  return out;
}

// The front by definition: points no other point dominates (ties: the lower index stays).
std::vector<int64_t> brute_front(const std::vector<RankedPoint>& pts) {
  std::vector<RankedPoint> out;
  for (const auto& p : pts) {
    bool dominated = false;
    for (const auto& q : pts) {
      if (&p == &q) continue;
      const bool le = q.step_time_s <= p.step_time_s && q.peak_hbm_bytes <= p.peak_hbm_bytes;
      const bool strict = q.step_time_s < p.step_time_s || q.peak_hbm_bytes < p.peak_hbm_bytes;
      if (le && (strict || q.index < p.index)) dominated = true;
    }
    if (!dominated) out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step_time_s < b.step_time_s; });
  return indices(out);
}

}  // namespace

TEST_CASE("Pareto front of step time against peak HBM, by hand") {
  //   index  time  memory
  //     0    10     50     front (fastest)
  //     1    12     40     front
  //     2    12     45     dominated by 1
  //     3    15     40     dominated by 1 (slower, same memory)
  //     4    20     20     front (smallest)
  //     5    11     60     dominated by 0
  //     6    20     20     equal to 4: the first one stays
  const std::vector<RankedPoint> pts = {pt(0, 10, 50), pt(1, 12, 40), pt(2, 12, 45), pt(3, 15, 40),
                                        pt(4, 20, 20), pt(5, 11, 60), pt(6, 20, 20)};
  ParetoFront front;
  for (const auto& p : pts) front.add(p);
  CHECK(indices(front.points()) == std::vector<int64_t>{0, 1, 4});
  CHECK(indices(front.points()) == brute_front(pts));
}

TEST_CASE("a later point can remove several earlier ones") {
  ParetoFront front;
  for (const auto& p : {pt(0, 10, 50), pt(1, 12, 40), pt(2, 14, 30)}) front.add(p);
  CHECK(indices(front.points()) == std::vector<int64_t>{0, 1, 2});
  front.add(pt(3, 9, 30));  // faster and smaller than all of them
  CHECK(indices(front.points()) == std::vector<int64_t>{3});
}

TEST_CASE("the front matches the definition on pseudo-random points") {
  std::vector<RankedPoint> pts;
  uint64_t x = 12345;
  for (int64_t i = 0; i < 300; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const double t = static_cast<double>((x >> 33) % 40);
    const double m = static_cast<double>((x >> 17) % 40);
    pts.push_back(pt(i, t, m));
  }
  ParetoFront front;
  for (const auto& p : pts) front.add(p);
  CHECK(indices(front.points()) == brute_front(pts));
}

TEST_CASE("top N: configurations that fit first, then by step time, then by index") {
  TopN top(3);
  top.add(pt(0, 5, 1, false));  // fastest but does not fit
  top.add(pt(1, 9, 1));
  top.add(pt(2, 7, 1));
  top.add(pt(3, 7, 1));   // ties with 2: the lower index first
  top.add(pt(4, 12, 1));  // falls off
  CHECK(indices(top.points()) == std::vector<int64_t>{2, 3, 1});
  TopN all(10);
  for (const auto& p : {pt(0, 5, 1, false), pt(1, 9, 1), pt(2, 7, 1)}) all.add(p);
  CHECK(indices(all.points()) == std::vector<int64_t>{2, 1, 0});
}
