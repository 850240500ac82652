// SPDX-License-Identifier: MIT
// Expert parallelism's layout and dispatch. The routed experts' own parallel layout (Megatron-Core's
// MoE parallel folding): with expert
// tensor parallelism ETP below TP, each rank routes its own sequence shard, EP spans the TP ranks
// outside an expert-TP group, the experts run at full width / ETP, and the shared experts keep the
// dense TP region. Checked against closed forms on Kimi Linear (shared expert, sigmoid router)
// and by a complete simulation. Hierarchical dispatch: fewer bytes on the network, a shorter step.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "engine/engine.hpp"
#include "core/error.hpp"
#include "graph/graph_checks.hpp"

using namespace moesim;
using test::Plan;

namespace {

// 8 GPUs as TP 2 x FSDP2 4 with EP 4: unfolded (ETP 2, EP over the shard group) or folded.
Plan kimi_linear(int64_t tp, int64_t etp, int64_t ep) {
  Plan p;
  p.model = "kimi-linear-48b-a3b";
  p.devices = 8;
  p.tp = tp;
  p.etp = etp;
  p.shard = 8 / tp;
  p.ep = ep;
  p.global_batch = 8;
  p.seq = 4096;
  return p;
}

struct Totals {
  double expert_flops = 0;              // routed experts' grouped GEMMs, one rank
  std::map<std::string, int> by_name;   // op name -> count
  std::map<GroupKind, int> collectives; // group -> collectives
  double all_to_all_bytes = 0;
  int all_to_all = 0;
};

Totals totals(const StepGraph& g) {
  Totals t;
  for (const Op& op : g.programs[0].ops) {
    ++t.by_name[g.programs[0].name_of(op)];
    if (op.kind == OpKind::grouped_gemm) t.expert_flops += op.flops;
    if (is_communication(op.kind)) ++t.collectives[op.group];
    if (op.kind == OpKind::all_to_all) {
      t.all_to_all_bytes = op.comm_bytes;
      ++t.all_to_all;
    }
  }
  return t;
}

// Ops whose name contains `part` (names carry the layer, pass and micro-batch around it).
int named(const Totals& t, const std::string& part) {
  int n = 0;
  for (const auto& [name, count] : t.by_name) n += name.find(part) != std::string::npos ? count : 0;
  return n;
}

}  // namespace

TEST_CASE("ETP 1 under TP 2: each rank routes half the tokens to EP ranks that span TP, at the same expert FLOPs") {
  const Scenario unfolded_s = test::scenario(kimi_linear(2, 0, 4));
  const Scenario folded_s = test::scenario(kimi_linear(2, 1, 4));
  const StepGraph unfolded = build_step_graph(unfolded_s);
  const StepGraph folded = build_step_graph(folded_s);
  CHECK(check_collective_order(folded).empty());
  CHECK(folded.plan.group_size(GroupKind::edp) == 2);  // 4 shards x 2 TP ranks / EP 4
  CHECK(unfolded.plan.group_size(GroupKind::edp) == 1);
  CHECK(folded.routed_tokens_per_micro_batch() == 4096 / 2);
  CHECK(unfolded.routed_tokens_per_micro_batch() == 4096);

  const Totals u = totals(unfolded), f = totals(folded);
  // The experts' work per rank is the same (half the tokens at twice the width) ...
  CHECK(f.expert_flops == doctest::Approx(u.expert_flops));
  // ... each dispatch moves half the rows: tokens / tp x top_k x hidden x 2 bytes.
  CHECK(f.all_to_all == u.all_to_all);
  CHECK(f.all_to_all_bytes == doctest::Approx(2048.0 * 8 * 2304 * 2));
  CHECK(u.all_to_all_bytes == doctest::Approx(2.0 * f.all_to_all_bytes));
  // The shared expert keeps the dense TP region; the routed experts have no TP collectives.
  CHECK(named(f, "moe.shared_experts.tp_all_gather") > 0);
  CHECK(named(f, "moe.shared_experts.tp_all_gather") == named(u, "ffn.tp_all_gather") - named(f, "ffn.tp_all_gather"));
  CHECK(!f.collectives.contains(GroupKind::etp));
  for (const Op& op : folded.programs[0].ops) {
    if (op.kind == OpKind::router) CHECK(op.m == 2048);
    if (op.kind == OpKind::grouped_gemm && op.k == 2304) CHECK(op.n == 2 * 1024);  // gate+up, full width
  }
  // Every rank holds the same share of the weights either way (EP x ETP x EDP = shard x TP).
  const auto pu = persistent_state(unfolded_s, unfolded.plan), pf = persistent_state(folded_s, folded.plan);
  CHECK(pf[0].params == doctest::Approx(pu[0].params));
}

TEST_CASE("ETP 2 under TP 4: the experts' collectives run in the expert-TP group, and the step completes") {
  Plan p = kimi_linear(4, 2, 4);
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  CHECK(g.routed_tokens_per_micro_batch() == 4096 / 4 * 2);
  const Totals t = totals(g);
  CHECK(named(t, "moe.experts.etp_all_gather") > 0);
  CHECK(t.collectives.contains(GroupKind::etp));
  for (const Op& op : g.programs[0].ops) {
    if (op.kind == OpKind::grouped_gemm && op.k == 2304) CHECK(op.n == 2 * 1024 / 2);
  }
  const CostModel cost(s.hardware);
  const StepResult r = Engine(g, cost).run(EngineOptions{});
  CHECK(r.step_time > 0);  // the engine throws when any op of any rank did not run
}

TEST_CASE("the checker refuses layouts no framework runs") {
  auto refused = [](const Plan& p, const std::string& path) {
    CAPTURE(path);
    try {
      test::scenario(p);
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
  };
  refused(kimi_linear(2, 3, 4), "/parallel/expert_tensor_parallel");  // does not divide tp
  Plan no_sp = kimi_linear(2, 1, 4);
  no_sp.sp = false;
  refused(no_sp, "/parallel/expert_tensor_parallel");                 // folding needs SP
  refused(kimi_linear(2, 1, 16), "/parallel/ep");                     // 16 > shard 4 x tp 2
  Plan dense = kimi_linear(2, 1, 1);
  dense.model = "llama-3.1-405b";
  refused(dense, "/parallel/expert_tensor_parallel");
}

TEST_CASE("hierarchical dispatch across two nodes: the same graph, a shorter all-to-all and step") {
  Plan p = test::qwen3_two_nodes();
  const Scenario direct_s = test::scenario(p);
  p.ep_dispatch = "hierarchical";
  const Scenario hier_s = test::scenario(p);
  const StepGraph direct = build_step_graph(direct_s), hier = build_step_graph(hier_s);
  CHECK(hier.expert_dispatch == ExpertDispatch::hierarchical);
  CHECK(hier.programs[0].ops.size() == direct.programs[0].ops.size());
  const CostModel cost(direct_s.hardware);
  const StepResult d = Engine(direct, cost).run({}), h = Engine(hier, cost).run({});
  auto a2a_busy = [](const StepResult& r) {
    for (const auto& [kind, t] : r.comm_busy) {
      if (kind == OpKind::all_to_all) return t;
    }
    return Picoseconds{0};
  };
  CHECK(a2a_busy(h) < a2a_busy(d));
  CHECK(h.step_time < d.step_time);
  // Group-limited routing with one group a node and one group a token: a token's experts all sit
  // on one node, so it crosses the network at most once (half the time), not once per expert-
  // holding remote node - fewer bytes than unlimited hierarchical dispatch.
  p.routing = R"({"groups": 2, "groups_per_token": 1})";
  const Scenario limited_s = test::scenario(p);
  const StepResult l = Engine(build_step_graph(limited_s), cost).run({});
  CHECK(a2a_busy(l) < a2a_busy(h));
}

TEST_CASE("placement: TP placed outside the node crosses the network, and the step says so by being slower") {
  Plan plan;  // LoRA on Llama 3.1 8B over two 8-GPU H200 nodes: TP 8 x 2 replicas (little DP traffic)
  plan.model = "llama-3.1-8b";
  plan.mode = "lora";
  plan.devices = 16;
  plan.tp = 8;
  plan.shard = 1;
  plan.replicate = 2;
  plan.global_batch = 8;
  const Scenario inside = test::scenario(plan);
  plan.placement = R"(["replicate", "tp", "cp", "shard", "pp"])";  // replicas side by side, TP across both nodes
  const Scenario across = test::scenario(plan);
  const StepGraph a = build_step_graph(inside);
  const StepGraph b = build_step_graph(across);
  CHECK(placement_of(a.plan.members(0, GroupKind::tp), 8).num_domains == 1);
  CHECK(placement_of(a.plan.members(0, GroupKind::replicate), 8).num_domains == 2);
  CHECK(b.plan.members(0, GroupKind::tp) == std::vector<int64_t>{0, 2, 4, 6, 8, 10, 12, 14});
  CHECK(placement_of(b.plan.members(0, GroupKind::tp), 8).num_domains == 2);
  CHECK(b.plan.members(0, GroupKind::replicate) == std::vector<int64_t>{0, 1});
  // The same ops; only where the ranks sit differs.
  CHECK(a.programs[0].ops.size() == b.programs[0].ops.size());
  const CostModel cost_a(inside.hardware), cost_b(across.hardware);
  const StepResult ra = Engine(a, cost_a).run({});
  const StepResult rb = Engine(b, cost_b).run({});
  MESSAGE("TP inside a node " << static_cast<double>(ra.step_time) * 1e-12 << " s, across nodes "
                              << static_cast<double>(rb.step_time) * 1e-12 << " s");
  CHECK(rb.step_time > ra.step_time);
}

TEST_CASE("placement: a dimension named twice is an input error at /parallel/placement") {
  Plan plan = kimi_linear(2, 2, 4);
  plan.placement = R"(["tp", "tp", "shard", "replicate", "pp"])";
  try {
    (void)test::scenario(plan);
    FAIL("accepted a placement without cp");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/parallel/placement") != std::string::npos);
  }
}
