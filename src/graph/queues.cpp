// SPDX-License-Identifier: MIT
#include "graph/queues.hpp"

#include <algorithm>
#include <stdexcept>

namespace moesim {

std::vector<int32_t> queue_places(const Program& p) {
  std::vector<int32_t> place(p.ops.size());
  std::array<int32_t, kNumQueues> count{};
  for (size_t i = 0; i < p.ops.size(); ++i) place[i] = ++count[static_cast<size_t>(queue_of(p.ops[i]))];
  return place;
}

std::vector<QueueClock> ordering_clocks(const Program& p) {
  const size_t n = p.ops.size();
  const std::vector<int32_t> place = queue_places(p);
  std::vector<QueueClock> clock(n);
  std::array<int64_t, kNumQueues> last{};
  last.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const int q = queue_of(p.ops[i]);
    QueueClock c{};
    auto after = [&](size_t d) {
      for (size_t k = 0; k < c.size(); ++k) c[k] = std::max(c[k], clock[d][k]);
      int32_t& own = c[static_cast<size_t>(queue_of(p.ops[d]))];
      own = std::max(own, place[d]);
    };
    if (last[static_cast<size_t>(q)] >= 0) after(static_cast<size_t>(last[static_cast<size_t>(q)]));
    for (uint32_t d : p.deps_of(p.ops[i])) {
      if (d >= i) throw std::logic_error("op '" + p.name_of(p.ops[i]) + "' depends on a later op");
      after(d);
    }
    clock[i] = c;
    last[static_cast<size_t>(q)] = static_cast<int64_t>(i);
  }
  return clock;
}

}  // namespace moesim
