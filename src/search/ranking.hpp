// SPDX-License-Identifier: MIT
// Ranking simulated configurations: the best N by step time (configurations that fit first),
// and the Pareto front of step time against peak HBM. Both take configurations one at a time in
// index order and keep only what they need, so a sweep of any size holds a bounded set.
#pragma once

#include <cstdint>
#include <vector>

namespace moesim {

// A simulated configuration with what the reports print of it.
struct RankedPoint {
  int64_t index = 0;       // configuration index: the tie-break, so results never depend on order
  double step_time_s = 0;  // mean over the sampled steps
  double peak_hbm_bytes = 0;
  bool fits = false;
  double step_time_p99_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double peak_ddr_bytes = 0;
  double memory_bound_bytes = 0;  // the pruning bound, for comparison with the peak
  double compute_s = 0;           // ConfigOutcome's breakdown
  double exposed_comm_s = 0;
  double bubble_s = 0;
  int64_t num_devices = 0;
};

// Fits first, then shorter step time, then lower index.
bool ranks_before(const RankedPoint& a, const RankedPoint& b);

// The best `capacity` points by ranks_before.
class TopN {
 public:
  explicit TopN(int64_t capacity) : capacity_(capacity) {}
  void add(const RankedPoint& p);
  const std::vector<RankedPoint>& points() const { return points_; }  // best first

 private:
  int64_t capacity_;
  std::vector<RankedPoint> points_;
};

// Non-dominated points: no other point is at most as slow and at most as large with one of the
// two strictly smaller. Of equal points the first added (the lower index) stays.
class ParetoFront {
 public:
  void add(const RankedPoint& p);
  // By step time ascending (so peak HBM descending).
  const std::vector<RankedPoint>& points() const { return points_; }

 private:
  std::vector<RankedPoint> points_;
};

}  // namespace moesim
