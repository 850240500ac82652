// SPDX-License-Identifier: MIT
#include "search/memory_bound.hpp"

#include <algorithm>

#include "graph/step_graph.hpp"

namespace moesim {

std::vector<double> persistent_lower_bound_per_stage(const Scenario& s) {
  const std::vector<PersistentMemory> stages = persistent_state(s, build_parallel_plan(s.spec), false);
  std::vector<double> out;
  // The runtime's reserve is on every rank; the communicators' buffers depend on the ops (left out).
  for (const PersistentMemory& p : stages) {
    out.push_back(p.params + p.master_params + p.grads + p.optimizer_states + runtime_reserved_bytes(s.spec, s.hardware));
  }
  return out;
}

double persistent_lower_bound_bytes(const Scenario& s) {
  const std::vector<double> stages = persistent_lower_bound_per_stage(s);
  return *std::max_element(stages.begin(), stages.end());
}

}  // namespace moesim
