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
  // Capacity padding builds the routed GEMMs at padded rows: hardware FLOPs, but the model's FLOPs
  // are the T k real rows' share.
  double routed_real_share = 1;
  if (routing != nullptr) {
    const int64_t tokens = g.routed_tokens_per_micro_batch();
    routed_real_share = static_cast<double>(tokens * routing->top_k()) / static_cast<double>(routing->expected_rows(tokens));
  }
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
        const bool routed = op.routing_layer >= 0 && (op.kind == OpKind::grouped_gemm || op.kind == OpKind::lora_gemm);
        s.model_flops_per_step += op.flops * n * (routed ? routed_real_share : 1.0);
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
