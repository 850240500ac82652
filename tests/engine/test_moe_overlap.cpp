// SPDX-License-Identifier: MIT
// How an MoE layer hides its expert all-to-all (overlap.moe_local_first, moe_dispatch_chunks,
// moe_shared_expert_overlap): the split graph does exactly the unsplit graph's work, every op runs,
// the local and remote GEMMs take the rows the routing draw gives (assignments a rank routed to
// itself, and those its peers sent), the ops of an MoE block start when the queues and
// dependencies say, computed by hand from the cost model, and each mechanism hides what it claims.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "engine/engine.hpp"
#include "graph/graph_checks.hpp"

using namespace moesim;
using test::Plan;

namespace {

struct Overlap {
  bool local_first = false;
  int64_t chunks = 1;
  bool shared = false;
};

// Qwen3-30B-A3B (128 experts, top-8, no shared experts) with EP over `devices` H200s, FSDP over
// all of them, one sequence of 4,096 tokens per rank and micro-batch.
Plan qwen(int64_t devices, int64_t ep) {
  Plan p;
  p.model = "qwen3-30b-a3b";
  p.devices = devices;
  p.shard = devices;
  p.ep = ep;
  p.global_batch = devices;
  p.seq = 4096;
  return p;
}

Scenario scenario_of(const Plan& plan, const Overlap& o) {
  Scenario s = test::scenario(plan);
  s.spec.overlap.moe_local_first = o.local_first;
  s.spec.overlap.moe_dispatch_chunks = o.chunks;
  s.spec.overlap.moe_shared_expert_overlap = o.shared;
  return s;
}

struct Run {
  Scenario scenario;
  StepGraph graph;
  StepResult result;
};

Run simulate(const Plan& plan, const Overlap& o, double overlap_slowdown = -1) {
  Scenario s = scenario_of(plan, o);
  if (overlap_slowdown >= 0) s.hardware.efficiency.overlap_slowdown = overlap_slowdown;
  Run run{s, build_step_graph(s), {}};
  EngineOptions opt;
  opt.record_timeline = true;
  run.result = Engine(run.graph, CostModel(s.hardware)).run(opt);
  return run;
}

double exposed_all_to_all(const StepResult& r) {
  for (const auto& [what, t] : r.exposed) {
    if (what == "all_to_all") return static_cast<double>(t) * 1e-12;
  }
  return 0;
}

// Per rank, how many executions the timeline recorded: every op of its program exactly once.
void check_every_op_ran(const Run& run) {
  std::map<int32_t, size_t> ran;
  for (const ExecRecord& e : run.result.timeline.records) ++ran[e.rank];
  for (int64_t r = 0; r < run.graph.plan.num_ranks(); ++r) {
    const Program& p = run.graph.programs[static_cast<size_t>(run.graph.plan.program_of(r))];
    CHECK(ran[static_cast<int32_t>(r)] == p.ops.size());
  }
}

struct Work {
  double grouped_flops = 0, a2a_bytes = 0;
  int64_t grouped_ops = 0, a2a_ops = 0, local_ops = 0, remote_ops = 0;
};

Work work_of(const Program& p) {
  Work w;
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::grouped_gemm) {
      w.grouped_flops += op.flops;
      ++w.grouped_ops;
      w.local_ops += op.routing_part == RoutingPart::local ? 1 : 0;
      w.remote_ops += op.routing_part == RoutingPart::remote ? 1 : 0;
    }
    if (op.kind == OpKind::all_to_all) {
      w.a2a_bytes += op.comm_bytes;
      ++w.a2a_ops;
    }
  }
  return w;
}

const Op* find_op(const Program& p, const std::string& name, Phase phase, int32_t layer, int32_t micro,
                  uint32_t* index = nullptr) {
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.phase == phase && op.layer == layer && op.micro == micro && p.name_of(op) == name) {
      if (index) *index = i;
      return &op;
    }
  }
  return nullptr;
}

}  // namespace

TEST_CASE("split and chunked expert dispatch do the unsplit graph's work, and every op runs") {
  const Plan plan = qwen(8, 8);
  const Run base = simulate(plan, {});
  const Work w0 = work_of(base.graph.programs[0]);
  const int64_t moe_passes = w0.a2a_ops / 2;  // one dispatch and one combine per MoE layer pass
  REQUIRE(moe_passes > 0);
  for (const Overlap o : {Overlap{true, 1, false}, Overlap{false, 4, false}, Overlap{true, 3, false},
                          Overlap{false, 1, true}, Overlap{true, 2, true}}) {
    CAPTURE(o.local_first);
    CAPTURE(o.chunks);
    const Run run = simulate(plan, o);
    CHECK(check_step_graph(run.graph).empty());
    check_every_op_ran(run);
    const Work w = work_of(run.graph.programs[0]);
    // Rows split exactly (integer pieces), so FLOPs and all-to-all sizes add up to the unsplit ones.
    CHECK(w.grouped_flops == doctest::Approx(w0.grouped_flops).epsilon(1e-12));
    CHECK(w.a2a_bytes == doctest::Approx(w0.a2a_bytes).epsilon(1e-12));
    CHECK(w.a2a_ops == 2 * o.chunks * moe_passes);
    CHECK(w.grouped_ops == w0.grouped_ops * o.chunks * (o.local_first ? 2 : 1));
    CHECK(w.local_ops == (o.local_first ? w.grouped_ops / 2 : 0));
    CHECK(w.remote_ops == (o.local_first ? w.grouped_ops / 2 : 0));
  }
}

TEST_CASE("local-first: the local GEMMs take the rows a rank routed to itself, the remote ones the rest") {
  // Overlap slowdown off, so that each kernel takes exactly the cost model's time at its rows.
  Plan plan = qwen(4, 4);
  plan.routing = R"({"distribution": "skewed", "skew": 0.8, "seed": 7})";
  const Run run = simulate(plan, {true, 1, false}, 0.0);
  const StepGraph& g = run.graph;
  const CostModel cost(run.scenario.hardware);
  const Program& p = g.programs[0];
  const int64_t ep = 4;
  const int64_t t = g.routed_tokens_per_micro_batch();
  const int64_t k = g.routing->top_k();
  const int32_t layer = 3;  // an MoE layer
  std::vector<int64_t> received(ep), kept(ep);
  g.routing->sample_group_loads(0, layer, 0, 0, t, received, kept);
  int64_t checked = 0;
  for (const ExecRecord& e : run.result.timeline.records) {
    const Op& op = p.ops[e.op];
    if (op.kind != OpKind::grouped_gemm || op.layer != layer || op.micro != 0 || op.phase != Phase::fwd) continue;
    const auto r = static_cast<size_t>(e.rank);
    const double rows = op.routing_part == RoutingPart::local ? static_cast<double>(kept[r])
                                                              : static_cast<double>(received[r] - kept[r]);
    const double scale = rows / static_cast<double>(routed_part_rows(t * k, ep, op.routing_part));
    const double want = cost.kernel_seconds(op, scale);
    CHECK(static_cast<double>(e.end - e.start) * 1e-12 == doctest::Approx(want).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked == 4 * ep);  // local and remote up- and down-projections on each rank
  // The draw is skewed: ranks keep different numbers of their own assignments.
  CHECK(*std::max_element(kept.begin(), kept.end()) > *std::min_element(kept.begin(), kept.end()));
}

TEST_CASE("local-first on two ranks: the MoE block's timeline as the queues and dependencies give it") {
  // Two H200s, EP 2, one MoE layer's forward on rank 0. With the overlap slowdown off, a compute op
  // lasts exactly its kernel time at its rows, and starts when both the previous compute op and
  // its inputs are done.
  Plan plan = qwen(2, 2);
  plan.fused = R"({"permute_gemm": false})";
  const Run run = simulate(plan, {true, 1, false}, 0.0);
  const Program& p = run.graph.programs[0];
  std::map<uint32_t, std::pair<double, double>> when;  // op index -> (start, end) on rank 0, seconds
  for (const ExecRecord& e : run.result.timeline.records) {
    if (e.rank == 0) when[e.op] = {static_cast<double>(e.start) * 1e-12, static_cast<double>(e.end) * 1e-12};
  }
  const int32_t layer = 2;
  auto op_at = [&](const std::string& name) {
    uint32_t i = 0;
    const Op* op = find_op(p, "layer" + std::to_string(layer) + "." + name, Phase::fwd, layer, 0, &i);
    REQUIRE_MESSAGE(op != nullptr, name);
    return i;
  };
  const uint32_t permute = op_at("moe.permute"), dispatch = op_at("moe.dispatch");
  const uint32_t lup = op_at("moe.experts.local.up_proj"), lact = op_at("moe.experts.local.act");
  const uint32_t up = op_at("moe.experts.up_proj"), act = op_at("moe.experts.act");
  const uint32_t down = op_at("moe.experts.down_proj"), ldown = op_at("moe.experts.local.down_proj");
  const uint32_t combine = op_at("moe.combine"), unpermute = op_at("moe.unpermute");
  // The compute queue runs: permute, local up, local act, up, act, down, local down, unpermute.
  CHECK(permute < lup);
  CHECK(lup < lact);
  CHECK(lact < dispatch);
  CHECK(dispatch < up);
  CHECK(down < ldown);
  CHECK(ldown < combine);
  CHECK(combine < unpermute);
  const CostModel cost(run.scenario.hardware);
  // Rows this rank takes in each part (the sampler's draw), hence each compute op's time.
  const StepGraph& g = run.graph;
  const int64_t t = g.routed_tokens_per_micro_batch(), k = g.routing->top_k();
  std::vector<int64_t> received(2), kept(2);
  g.routing->sample_group_loads(0, layer, 0, 0, t, received, kept);
  auto gemm_s = [&](uint32_t i) {
    const Op& op = p.ops[i];
    const double rows = op.routing_part == RoutingPart::local ? static_cast<double>(kept[0])
                                                              : static_cast<double>(received[0] - kept[0]);
    return cost.kernel_seconds(op, rows / static_cast<double>(routed_part_rows(t * k, 2, op.routing_part)));
  };
  auto kernel_s = [&](uint32_t i) { return cost.kernel_seconds(p.ops[i]); };
  // By hand: the local part runs under the dispatch, the remote part after it. The all-to-alls
  // start when both ranks have reached them, so their times are read from the run.
  const double t0 = when[permute].second;
  const double lup_end = t0 + gemm_s(lup);
  const double lact_end = lup_end + kernel_s(lact);
  CHECK(when[dispatch].first >= t0);
  const double up_start = std::max(lact_end, when[dispatch].second);
  const double up_end = up_start + gemm_s(up);
  const double act_end = up_end + kernel_s(act);
  const double down_end = act_end + gemm_s(down);
  const double ldown_end = down_end + gemm_s(ldown);
  const double unpermute_start = std::max(ldown_end, when[combine].second);
  CHECK(when[lup].first == doctest::Approx(t0).epsilon(1e-12));
  CHECK(when[lact].second == doctest::Approx(lact_end).epsilon(1e-12));
  CHECK(when[up].first == doctest::Approx(up_start).epsilon(1e-12));
  CHECK(when[down].second == doctest::Approx(down_end).epsilon(1e-12));
  CHECK(when[combine].first >= down_end - 1e-12);  // the engine's clock ticks in picoseconds
  CHECK(when[ldown].first == doctest::Approx(down_end).epsilon(1e-12));
  CHECK(when[ldown].second == doctest::Approx(ldown_end).epsilon(1e-12));
  CHECK(when[unpermute].first == doctest::Approx(unpermute_start).epsilon(1e-12));
  // Something was hidden: the local GEMMs ran inside the dispatch.
  CHECK(when[lup].first < when[dispatch].second);
}

TEST_CASE("each mechanism hides exposed all-to-all, and none makes these steps slower") {
  // EP 16 over two H200 nodes: the all-to-all crosses InfiniBand and is worth hiding.
  const Plan plan = qwen(16, 16);
  const Run base = simulate(plan, {});
  const double base_a2a = exposed_all_to_all(base.result);
  REQUIRE(base_a2a > 0);
  for (const Overlap o : {Overlap{true, 1, false}, Overlap{false, 2, false}, Overlap{false, 4, false},
                          Overlap{true, 4, false}}) {
    CAPTURE(o.local_first);
    CAPTURE(o.chunks);
    const Run run = simulate(plan, o);
    CHECK(exposed_all_to_all(run.result) < base_a2a);
    CHECK(run.result.step_time <= base.result.step_time);
  }
  // More chunks hide more, up to a point: 4 chunks hide more than 2.
  CHECK(exposed_all_to_all(simulate(plan, {false, 4, false}).result) <
        exposed_all_to_all(simulate(plan, {false, 2, false}).result));
}

TEST_CASE("shared-expert overlap: the shared experts run while the routed tokens travel") {
  // DeepSeek-V3-style shared expert on a test-sized K3: the default plan at test size.
  Plan plan = test::k3_supernode();
  const Run base = simulate(plan, {});
  const Run run = simulate(plan, {false, 1, true});
  check_every_op_ran(run);
  CHECK(exposed_all_to_all(run.result) < exposed_all_to_all(base.result));
  // In the forward of an MoE layer, the shared up-projection starts before the dispatch ends.
  const Program& p = run.graph.programs[0];
  std::map<uint32_t, std::pair<Picoseconds, Picoseconds>> when;
  for (const ExecRecord& e : run.result.timeline.records) {
    if (e.rank == 0) when[e.op] = {e.start, e.end};
  }
  uint32_t up = 0, dispatch = 0;
  REQUIRE(find_op(p, "layer5.moe.shared_experts.up_proj", Phase::fwd, 5, 0, &up));
  REQUIRE(find_op(p, "layer5.moe.dispatch", Phase::fwd, 5, 0, &dispatch));
  CHECK(when[up].first < when[dispatch].second);
  CHECK(when[up].second > when[dispatch].first);
}
