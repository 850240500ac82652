// SPDX-License-Identifier: MIT
#include "graph/graph_stats.hpp"

namespace moesim {

GraphStats compute_stats(const StepGraph& g, const RoutingSampler* routing) {
  if (routing == nullptr && g.routing) routing = &*g.routing;
  GraphStats s;
  s.num_ranks = g.plan.num_ranks();
  s.num_programs = g.plan.num_programs();
  s.num_micro_batches = g.num_micro_batches;
  s.tokens_per_step = g.tokens_per_step;
  const int64_t ranks_per_program = s.num_ranks / s.num_programs;
  for (const Program& p : g.programs) {
    s.num_program_ops += static_cast<int64_t>(p.ops.size());
    for (const Op& op : p.ops) {
      const auto n = static_cast<double>(ranks_per_program);
      KindStats& k = s.by_kind[op.kind];
      k.count += ranks_per_program;
      k.flops += op.flops * n;
      k.comm_bytes += op.comm_bytes * n;
      s.flops_per_step += op.flops * n;
      if (counts_as_model_flops(op.kind) && (op.phase == Phase::fwd || op.phase == Phase::bwd)) {
        s.model_flops_per_step += op.flops * n;
      }
      if (op.kind == OpKind::all_to_all && routing) {
        // EP rank e keeps the expected fraction Q_e of what it sends; the rest crosses the fabric.
        double remote = 0;
        for (int64_t e = 0; e < routing->ep(); ++e) {
          remote += 1.0 - routing->expected_fraction(op.routing_layer, e);
        }
        s.all_to_all_remote_bytes += op.comm_bytes * n * remote / static_cast<double>(routing->ep());
      }
    }
  }
  s.num_ops = s.num_program_ops * ranks_per_program;
  return s;
}

}  // namespace moesim
