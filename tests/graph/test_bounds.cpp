// SPDX-License-Identifier: MIT
// The step graph of a scenario at the largest sizes the loaders accept (tests/data/bad/bound/,
// written by tests/data/make_bad_inputs.py): 2^40 tokens per micro-batch through 2^20-wide
// layers. Products of sizes pass 2^63 there; they are counted in double (elements(), op.hpp), so
// each op's FLOPs and bytes are the closed forms, not int64 wrapped round (to 0 for these powers
// of two).
#include <doctest/doctest.h>

#include <cmath>

#include "core/json_input.hpp"
#include "graph/step_graph.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;

TEST_CASE("at the input bounds, every op's FLOPs and bytes are finite and the router's are its closed form") {
  const Scenario s = load_scenario(read_input("tests/data/bad/bound/widest-stats.json", "scenarios", "SCENARIO"));
  const StepGraph g = build_step_graph(s);
  const double t = std::ldexp(1.0, 40);  // 2^14 sequences of 2^26 tokens, one micro-batch
  REQUIRE(static_cast<double>(g.tokens_per_micro_batch) == t);
  REQUIRE(s.model.hidden_size == int64_t{1} << 20);
  REQUIRE(s.model.moe->num_experts == 16);
  int num_routers = 0;
  double all_to_all_bytes = 0;
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) {
      CAPTURE(p.names[op.name]);
      CHECK(std::isfinite(op.flops));
      CHECK(op.flops >= 0);
      CHECK(std::isfinite(op.bytes_read + op.bytes_written + op.comm_bytes));
      CHECK(op.bytes_read + op.bytes_written + op.comm_bytes >= 0);
      if (op.kind == OpKind::router && op.phase == Phase::fwd) {
        ++num_routers;
        // Scores of every token against every expert: 2 t d E = 2^65.
        CHECK(op.flops == 2.0 * t * std::ldexp(1.0, 20) * 16);
      }
      if (op.kind == OpKind::all_to_all) all_to_all_bytes += op.comm_bytes;
    }
  }
  CHECK(num_routers == 2);  // two MoE layers
  // The dispatch and combine move t x top_k rows of 2^20 bf16 values: 2^65 bytes each, not 0.
  CHECK(all_to_all_bytes > 0);
}
