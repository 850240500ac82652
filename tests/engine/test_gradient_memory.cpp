// SPDX-License-Identifier: MIT
// training.gradient_memory per_step: the parameter gradients take HBM from where the step first
// writes them to their unit's optimizer update (PyTorch's zero_grad(set_to_none=True)), not all run.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "cost/cost_model.hpp"
#include "engine/engine.hpp"

using namespace moesim;
using test::Plan;

namespace {

Scenario with(Plan p, const std::string& gradient_memory) {
  Scenario s = test::scenario(p);
  s.spec.training.gradient_memory = gradient_memory == "per_step" ? GradientMemory::per_step : GradientMemory::persistent;
  return s;
}

struct Run {
  StepGraph graph;
  StepResult result;
};

Run run(const Scenario& s) {
  StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  StepResult r = Engine(g, cost).run({});
  return {std::move(g), std::move(r)};
}

// The per-step gradient buffers of a program: bytes, and the names of the ops that allocate and
// free each.
struct Held {
  double bytes = 0;
  std::string alloc_op, free_op;
  int32_t alloc_micro = -1;
  Phase alloc_phase = Phase::fwd;
};
std::map<uint32_t, Held> step_grads(const Program& p) {
  std::map<uint32_t, Held> out;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    for (const MemEffect& e : p.effects_of(op)) {
      const Buffer& b = p.buffers[e.buffer];
      if (b.category != MemCategory::step_grads) continue;
      Held& h = out[e.buffer];
      h.bytes = b.bytes;
      if (e.action == MemAction::alloc) {
        CHECK(h.alloc_op.empty());
        h.alloc_op = p.name_of(op);
        h.alloc_micro = op.micro;
        h.alloc_phase = op.phase;
      } else {
        CHECK(e.action == MemAction::free);
        CHECK(h.free_op.empty());
        h.free_op = p.name_of(op);
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("per-step gradients: FSDP2 over 8 ranks, 2 micro-batches - each unit's shard from its first reduce-scatter to its AdamW") {
  Plan p;  // Qwen3-30B-A3B, FSDP2 8
  p.global_batch = 16;  // 2 micro-batches a rank
  const Scenario persistent = with(p, "persistent");
  const Scenario per_step = with(p, "per_step");
  const Run a = run(persistent);
  const Run b = run(per_step);
  REQUIRE(a.result.complete);
  REQUIRE(b.result.complete);
  const Program& pa = a.graph.programs.at(0);
  const Program& pb = b.graph.programs.at(0);
  CHECK(pa.persistent.grads > 0);
  CHECK(pb.persistent.grads == 0);
  const auto held = step_grads(pb);
  CHECK(step_grads(pa).empty());
  double total = 0;
  for (const auto& [buffer, h] : held) {
    CAPTURE(pb.names[pb.buffers[buffer].name]);
    total += h.bytes;
    CHECK(h.alloc_micro == 0);  // written by the first micro-batch's reduction
    CHECK(h.alloc_op.find("fsdp_reduce_scatter") != std::string::npos);
    CHECK(h.free_op.ends_with(".adamw"));
    CHECK(h.free_op.substr(0, h.free_op.find('.')) == h.alloc_op.substr(0, h.alloc_op.find('.')));  // same unit
  }
  // Exactly the bytes the persistent form holds all step, and every byte given back by the end.
  CHECK(total == doctest::Approx(pa.persistent.grads).epsilon(1e-12));
  for (const RankMemory& m : b.result.memory) {
    CHECK(m.final_hbm_bytes == doctest::Approx(m.persistent_bytes).epsilon(1e-12));
    CHECK(m.persistent_bytes == doctest::Approx(a.result.memory.at(0).persistent_bytes - pa.persistent.grads).epsilon(1e-12));
  }
  // Never more at the peak than the persistent form, and less by at most the gradients.
  const double peak_a = a.result.memory.at(0).peak_hbm_bytes - a.result.memory.at(0).allocator_reserve_bytes;
  const double peak_b = b.result.memory.at(0).peak_hbm_bytes - b.result.memory.at(0).allocator_reserve_bytes;
  CHECK(peak_b <= peak_a * (1 + 1e-12));
  CHECK(peak_b >= peak_a - pa.persistent.grads * (1 + 1e-12));
  CHECK(b.result.step_time == a.result.step_time);  // memory only
}

TEST_CASE("per-step gradients: one micro-batch peaking in the loss's backward holds none of them there") {
  // The trace harness's dense slice (4 layers, vocabulary 32,768) on one H200, one 8,192-token
  // micro-batch: the peak is the eager loss's backward, before any unit's backward wrote a
  // gradient. Over one rank there is no unsharded buffer: the gradients are the backward's
  // (param.grad), from the unit's first backward op.
  Plan p = test::one_gpu("models/calibration/llama-slice.json", 8192);
  p.loss = R"({"kind": "full", "implementation": "eager"})";
  const Run a = run(with(p, "persistent"));
  const Run b = run(with(p, "per_step"));
  const Program& pb = b.graph.programs.at(0);
  const RankMemory& ma = a.result.memory.at(0);
  const RankMemory& mb = b.result.memory.at(0);
  CHECK(pb.name_of(pb.ops.at(mb.peak_op)) == "loss.cross_entropy.bwd");
  CHECK(mb.peak_transient[static_cast<size_t>(MemCategory::step_grads)] == 0);
  const double grads = a.graph.programs.at(0).persistent.grads;
  CHECK(grads == doctest::Approx(322.96e6 * 4).epsilon(1e-3));  // FP32 gradients of its 323 M weights
  CHECK(ma.peak_hbm_bytes - ma.allocator_reserve_bytes - (mb.peak_hbm_bytes - mb.allocator_reserve_bytes) ==
        doctest::Approx(grads).epsilon(1e-9));
  for (const auto& [buffer, h] : step_grads(pb)) {
    CAPTURE(pb.names[pb.buffers[buffer].name]);
    CHECK(h.alloc_phase == Phase::bwd);
    CHECK(h.alloc_micro == 0);
    CHECK(h.free_op.ends_with(".adamw"));
  }
}
