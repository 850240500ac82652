// SPDX-License-Identifier: MIT
// Fusion analysis (analysis/fusion.hpp): a hand-built chain is found exactly, with its byte count;
// chains never hold a collective or an op of another queue; every rewritten graph passes the graph
// checks; and fusing never lengthens the simulated step, on a hand-built graph, a GPU calibration
// scenario and small test plans.
#include <doctest/doctest.h>

#include "../graph/graph_test_util.hpp"
#include "analysis/fusion.hpp"
#include "graph/graph_checks.hpp"
#include "core/json_input.hpp"
#include "graph/queues.hpp"

using namespace moesim;
using test::Plan;

namespace {

HardwareSpec h200() { return load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")); }

Op kernel(OpKind kind, double read, double written, double flops = 0) {
  Op op;
  op.kind = kind;
  op.layer = 1;
  op.micro = 0;
  op.bytes_read = read;
  op.bytes_written = written;
  op.flops = flops;
  return op;
}

Op collective(OpKind kind, double bytes) {
  Op op;
  op.kind = kind;
  op.stream = Stream::comm;
  op.group = GroupKind::fsdp;
  op.comm_bytes = bytes;
  op.layer = 1;
  op.micro = 0;
  return op;
}

TensorDesc rows(int64_t r, int64_t c) { return TensorDesc{{r, c, 0, 0}, Dtype::bf16}; }

// One layer by hand (2 ranks, an FSDP group of 2):
//   0 elementwise "in"      allocates x (kept until 3)
//   1 norm        "norm"    x -> n           n: 2 MiB, read only by 2
//   2 activation  "act"     n -> a (frees n) a: 2 MiB, read only by 3
//   3 elementwise "mul"     a, x -> m (frees a, x)
//   4 all_reduce  "reduce"  m (frees m)      a collective waiting on 3
//   5 norm        "norm2"   allocates p      p is read by 7, across a collective:
//   6 all_gather  "gather"
//   7 activation  "act2"    frees p          (5 and 7 are not adjacent: no candidate)
//   8 elementwise "e3"      allocates q
//   9 activation  "act3"    frees q, waits on the all-gather 6 (off-queue dependency: no candidate)
StepGraph hand_graph() {
  StepGraph g;
  g.scenario = "hand";
  g.plan = ParallelPlan(MeshShape{1, 1, 2, 1, 1, 2});
  g.tokens_per_micro_batch = 1024;
  Program p;
  ProgramWriter w(p);
  const TensorDesc t = rows(1024, 1024);  // 2 MiB in bf16
  const double b = t.bytes();
  const uint32_t bx = w.buffer(b, MemCategory::activation, "x");
  const uint32_t bn = w.buffer(b, MemCategory::activation, "n");
  const uint32_t ba = w.buffer(b, MemCategory::activation, "a");
  const uint32_t bm = w.buffer(b, MemCategory::activation, "m");
  const uint32_t bp = w.buffer(b, MemCategory::activation, "p");
  const uint32_t bq = w.buffer(b, MemCategory::activation, "q");
  const TensorDesc one[] = {t};
  const TensorDesc two[] = {t, t};
  uint32_t i = w.add(kernel(OpKind::elementwise, 0, b), "layer1.in", {}, one);
  w.effect(i, bx, MemAction::alloc);
  i = w.add(kernel(OpKind::norm, b, b, 4 * 1024.0 * 1024), "layer1.norm", one, one);
  w.effect(i, bn, MemAction::alloc);
  i = w.add(kernel(OpKind::activation, b, b, 8 * 1024.0 * 1024), "layer1.act", one, one);
  w.effect(i, ba, MemAction::alloc);
  w.effect(i, bn, MemAction::free);
  i = w.add(kernel(OpKind::elementwise, 2 * b, b, 1024.0 * 1024), "layer1.mul", two, one);
  w.effect(i, bm, MemAction::alloc);
  w.effect(i, ba, MemAction::free);
  w.effect(i, bx, MemAction::free);
  const uint32_t mul = i;
  i = w.add(collective(OpKind::all_reduce, b), "layer1.reduce", one, one);
  w.depend(i, mul);
  w.effect(i, bm, MemAction::free);
  i = w.add(kernel(OpKind::norm, b, b), "layer1.norm2", one, one);
  w.effect(i, bp, MemAction::alloc);
  const uint32_t gather = w.add(collective(OpKind::all_gather, b), "layer1.gather", one, one);
  i = w.add(kernel(OpKind::activation, b, b), "layer1.act2", one, one);
  w.effect(i, bp, MemAction::free);
  i = w.add(kernel(OpKind::elementwise, b, b), "layer1.e3", one, one);
  w.effect(i, bq, MemAction::alloc);
  i = w.add(kernel(OpKind::activation, b, b), "layer1.act3", one, one);
  w.depend(i, gather);
  w.effect(i, bq, MemAction::free);
  g.programs.push_back(std::move(p));
  return g;
}

// Every chain of every candidate: compute-queue ops of one phase, layer and micro-batch, with
// nothing of another queue among them, and not the same op in two candidates.
void check_candidates(const StepGraph& g, const std::vector<FusionCandidate>& cands) {
  std::vector<std::vector<int>> used(g.programs.size());
  for (size_t pi = 0; pi < g.programs.size(); ++pi) used[pi].assign(g.programs[pi].ops.size(), 0);
  for (const FusionCandidate& c : cands) {
    CHECK(c.launches_saved_per_rank >= c.occurrences_per_rank);
    CHECK(c.hbm_bytes_saved_per_rank > 0);
    CHECK(c.kept_activation_bytes_saved == 0);
    for (const FusionChain& ch : c.chains) {
      REQUIRE(ch.program < g.programs.size());
      const Program& p = g.programs[ch.program];
      REQUIRE(ch.count >= 2);
      REQUIRE(ch.first + ch.count <= p.ops.size());
      const Op& head = p.ops[ch.first];
      for (uint32_t k = 0; k < ch.count; ++k) {
        const Op& op = p.ops[ch.first + k];
        CHECK(queue_of(op) == kComputeQueue);
        CHECK(op.stream == Stream::compute);
        CHECK_FALSE(is_communication(op.kind));
        CHECK(op.kind != OpKind::swap_in);
        CHECK(op.kind != OpKind::swap_out);
        CHECK(op.phase == head.phase);
        CHECK(op.layer == head.layer);
        CHECK(op.micro == head.micro);
        CHECK(++used[ch.program][ch.first + k] == 1);
      }
    }
  }
}

double seconds(const StepResult& r) { return static_cast<double>(r.step_time) * 1e-12; }

// Each candidate alone and all together: the rewritten graph passes every check and its step is
// no longer than the original's.
void check_never_slower(const StepGraph& g, const CostModel& cost, size_t max_alone = 1000) {
  const auto cands = find_fusion_candidates(g);
  check_candidates(g, cands);
  REQUIRE_FALSE(cands.empty());
  Engine base_engine(g, cost);
  const double base = seconds(base_engine.run({}));
  std::vector<FusionChain> all;
  for (size_t c = 0; c < cands.size(); ++c) {
    all.insert(all.end(), cands[c].chains.begin(), cands[c].chains.end());
    if (c >= max_alone) continue;
    const StepGraph f = apply_fusions(g, cands[c].chains);
    const auto errors = check_step_graph(f);
    CHECK_MESSAGE(errors.empty(), cands[c].key(), ": ", (errors.empty() ? "" : errors.front()));
    Engine e(f, cost);
    const double t = seconds(e.run({}));
    CHECK_MESSAGE(t <= base * (1 + 1e-12), cands[c].key(), ": ", t, " > ", base);
  }
  const StepGraph f = apply_fusions(g, all);
  const auto errors = check_step_graph(f);
  CHECK_MESSAGE(errors.empty(), (errors.empty() ? "" : errors.front()));
  size_t ops_before = 0, ops_after = 0, launches = 0;
  for (const Program& p : g.programs) ops_before += p.ops.size();
  for (const Program& p : f.programs) ops_after += p.ops.size();
  for (const FusionChain& ch : all) launches += ch.count - 1;
  CHECK(ops_after + launches == ops_before);
  Engine e(f, cost);
  const StepResult r = e.run({});
  CHECK(seconds(r) < base);
  for (const RankMemory& m : r.memory) CHECK(m.final_hbm_bytes == doctest::Approx(m.persistent_bytes).epsilon(1e-9));
}

}  // namespace

TEST_CASE("a hand-built memory-bound chain is found exactly, with its byte count, and nothing across a collective") {
  const StepGraph g = hand_graph();
  REQUIRE(check_step_graph(g).empty());
  const auto cands = find_fusion_candidates(g);
  REQUIRE(cands.size() == 1);
  const FusionCandidate& c = cands[0];
  CHECK(c.rule == FusionRule::memory_bound_chain);
  CHECK(c.ops == std::vector<std::string>{"norm", "act", "mul"});
  REQUIRE(c.chains.size() == 1);
  CHECK(c.chains[0].first == 1);
  CHECK(c.chains[0].count == 3);
  const double b = 1024.0 * 1024 * 2;
  CHECK(c.hbm_bytes_saved_per_rank == 4 * b);  // n and a, each written once and read once
  CHECK(c.hbm_bytes_saved_all_ranks == 8 * b);  // 2 ranks
  CHECK(c.launches_saved_per_rank == 2);
  CHECK(c.occurrences_per_rank == 1);
  CHECK(c.transient_bytes_avoided == b);
  check_candidates(g, cands);

  const StepGraph f = apply_fusions(g, c.chains);
  CHECK(check_step_graph(f).empty());
  const Program& p = f.programs[0];
  REQUIRE(p.ops.size() == 8);
  const Op& fused = p.ops[1];
  CHECK(p.name_of(fused) == "layer1.norm+act+mul");
  CHECK(fused.kind == OpKind::norm);
  CHECK(fused.bytes_read == 2 * b);     // x twice (norm, mul): n and a are no longer read
  CHECK(fused.bytes_written == b);      // m only
  CHECK(fused.flops == (4 + 8 + 1) * 1024.0 * 1024);
  CHECK(p.inputs(fused).size() == 2);   // x for the norm and x for the mul
  CHECK(p.outputs(fused).size() == 1);
  CHECK(p.buffers.size() == 4);         // n and a are gone
  // The all-reduce now waits on the fused op.
  REQUIRE(p.deps_of(p.ops[2]).size() == 1);
  CHECK(p.deps_of(p.ops[2])[0] == 1);

  const CostModel cost(h200());
  Engine before(g, cost), after(f, cost);
  const StepResult rb = before.run({}), ra = after.run({});
  CHECK(ra.step_time < rb.step_time);
  // Two launches and 8 MiB of traffic fewer on the compute stream.
  const double saved = cost.kernel_seconds(g.programs[0].ops[1]) + cost.kernel_seconds(g.programs[0].ops[2]) +
                       cost.kernel_seconds(g.programs[0].ops[3]) - cost.kernel_seconds(fused);
  CHECK(saved > 0);
  CHECK(seconds(rb) - seconds(ra) == doctest::Approx(saved).epsilon(1e-6));

  const FusionAnalysis a = analyse_fusions(g, cost, {});
  REQUIRE(a.gains.size() == 1);
  CHECK(a.gains[0].step_delta_s < 0);
  REQUIRE(a.cumulative.size() == 1);
  CHECK(a.cumulative[0].step_time_s == doctest::Approx(a.gains[0].step_time_s));
  CHECK(a.simulations == 3);
}

TEST_CASE("a GEMM whose output only its activation reads is a matmul epilogue") {
  StepGraph g;
  g.plan = ParallelPlan(MeshShape{1, 1, 2, 1, 1, 2});
  g.tokens_per_micro_batch = 1024;
  Program p;
  ProgramWriter w(p);
  const TensorDesc t = rows(1024, 4096);
  const double b = t.bytes();
  const uint32_t by = w.buffer(b, MemCategory::activation, "y");
  const uint32_t bz = w.buffer(b, MemCategory::activation, "z");
  Op gemm = kernel(OpKind::gemm, b, b, 2.0 * 1024 * 4096 * 4096);
  gemm.m = 1024;
  gemm.n = gemm.k = 4096;
  const TensorDesc one[] = {t};
  uint32_t i = w.add(gemm, "layer1.up_proj", one, one);
  w.effect(i, by, MemAction::alloc);
  i = w.add(kernel(OpKind::activation, b, b), "layer1.act", one, one);
  w.effect(i, bz, MemAction::alloc);
  w.effect(i, by, MemAction::free);
  i = w.add(kernel(OpKind::elementwise, b, 0), "layer1.sink", one, {});
  w.effect(i, bz, MemAction::free);
  g.programs.push_back(std::move(p));
  const auto cands = find_fusion_candidates(g);
  // up_proj -> act -> sink: z is also an intermediate (read only by the sink), so one chain of 3.
  REQUIRE(cands.size() == 1);
  CHECK(cands[0].rule == FusionRule::matmul_epilogue);
  CHECK(cands[0].ops == std::vector<std::string>{"up_proj", "act", "sink"});
  CHECK(cands[0].hbm_bytes_saved_per_rank == 4 * b);
  const StepGraph f = apply_fusions(g, cands[0].chains);
  CHECK(check_step_graph(f).empty());
  REQUIRE(f.programs[0].ops.size() == 1);
  const Op& fused = f.programs[0].ops[0];
  CHECK(fused.kind == OpKind::gemm);
  CHECK(fused.m == 1024);
  CHECK(fused.bytes_read == b);
  CHECK(fused.bytes_written == 0);
}

TEST_CASE("fusing never lengthens the step: GPU calibration slice (2 GPUs, EP 2)") {
  const Scenario s = load_scenario(read_input("scenarios/calibration/k3-slice-2gpu.json", "scenarios", "SCENARIO"));
  const StepGraph g = build_step_graph(s);
  check_never_slower(g, CostModel(s.hardware));
}

TEST_CASE("fusing never lengthens the step: small test plans") {
  SUBCASE("qwen3-30b-a3b, FSDP 8 + EP 8, selective recompute") {
    Plan p;
    p.ep = 8;
    p.global_batch = 16;
    p.seq = 2048;
    p.recompute = "selective";
    const Scenario s = test::scenario(p);
    check_never_slower(build_step_graph(s), CostModel(s.hardware));
  }
  SUBCASE("qwen3-30b-a3b, no recompute, LoRA") {
    Plan p;
    p.ep = 8;
    p.mode = "lora";
    p.lora_targets = R"(["q_proj", "o_proj", "routed_experts"])";
    const Scenario s = test::scenario(p);
    check_never_slower(build_step_graph(s), CostModel(s.hardware));
  }
  SUBCASE("pipeline: PP 2 x FSDP 4, 1F1B, full recompute") {
    Plan p;
    p.pp = 2;
    p.shard = 4;
    p.ep = 4;
    p.global_batch = 16;
    p.seq = 1024;
    p.recompute = "full";
    const Scenario s = test::scenario(p);
    check_never_slower(build_step_graph(s), CostModel(s.hardware));
  }
}
