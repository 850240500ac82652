// SPDX-License-Identifier: MIT
// training.optimizer.implementation foreach: PyTorch's multi-tensor AdamW - its 8 kernels and
// passes per unit, and the temporary of the second moment's size that spans the whole step.
#include <doctest/doctest.h>

#include <string>

#include "../graph/graph_test_util.hpp"
#include "cost/cost_model.hpp"
#include "engine/engine.hpp"

using namespace moesim;
using test::Plan;

namespace {

Scenario with(const std::string& implementation) {
  Plan p;  // Qwen3-30B-A3B over FSDP2 8, FP32 master weights, gradients and moments
  Scenario s = test::scenario(p);
  s.spec.training.optimizer.implementation =
      implementation == "foreach" ? OptimizerImplementation::foreach : OptimizerImplementation::fused;
  return s;
}

}  // namespace

TEST_CASE("foreach AdamW: 8 kernels and 80 bytes a parameter per unit, and one temporary of every moment from the first unit to the last") {
  const Scenario fused = with("fused");
  const Scenario foreach = with("foreach");
  const StepGraph gf = build_step_graph(fused);
  const StepGraph ge = build_step_graph(foreach);
  const Program& pf = gf.programs.at(0);
  const Program& pe = ge.programs.at(0);
  std::vector<uint32_t> fused_ops, foreach_ops;
  for (uint32_t i = 0; i < pf.ops.size(); ++i) if (pf.ops[i].kind == OpKind::optimizer) fused_ops.push_back(i);
  for (uint32_t i = 0; i < pe.ops.size(); ++i) if (pe.ops[i].kind == OpKind::optimizer) foreach_ops.push_back(i);
  REQUIRE(fused_ops.size() == foreach_ops.size());
  REQUIRE(foreach_ops.size() > 2);
  double params = 0;
  for (size_t k = 0; k < fused_ops.size(); ++k) {
    const Op& f = pf.ops[fused_ops[k]];
    const Op& e = pe.ops[foreach_ops[k]];
    const double n = f.flops / 12;  // trainable parameters of the unit on this rank
    params += n;
    CHECK(f.num_kernels == 1);
    CHECK(f.bytes_read == doctest::Approx(n * 16));     // p, g, m, v
    CHECK(f.bytes_written == doctest::Approx(n * 12));  // p, m, v
    CHECK(e.num_kernels == 8);
    CHECK(e.flops == f.flops);
    CHECK(e.bytes_read == doctest::Approx(n * 48));
    CHECK(e.bytes_written == doctest::Approx(n * 32));
  }
  // The temporary: allocated by the first optimizer op, released by the last, 4 bytes a parameter.
  int allocs = 0, frees = 0;
  for (uint32_t i = 0; i < pe.ops.size(); ++i) {
    for (const MemEffect& m : pe.effects_of(pe.ops[i])) {
      if (pe.names[pe.buffers[m.buffer].name] != "optimizer.foreach_temp") continue;
      CHECK(pe.buffers[m.buffer].bytes == doctest::Approx(params * 4).epsilon(1e-12));
      if (m.action == MemAction::alloc) {
        ++allocs;
        CHECK(i == foreach_ops.front());
      } else {
        ++frees;
        CHECK(i == foreach_ops.back());
      }
    }
  }
  CHECK(allocs == 1);
  CHECK(frees == 1);
  // The optimizer takes longer (more bytes, more kernels) and the step's memory balances.
  const CostModel cf(fused.hardware), ce(foreach.hardware);
  const StepResult rf = Engine(gf, cf).run({});
  const StepResult re = Engine(ge, ce).run({});
  CHECK(re.step_time > rf.step_time);
  for (const RankMemory& m : re.memory) CHECK(m.final_hbm_bytes == doctest::Approx(m.persistent_bytes).epsilon(1e-12));
}

TEST_CASE("foreach AdamW only for adamw on the GPU") {
  auto load = [](const std::string& optimizer, const std::string& offload) {
    return load_scenario(InputText{
        "t.json",
        R"({"name": "t", "model": "qwen3-30b-a3b", "hardware": "h200-hgx", "num_devices": 8, "training": {"mode": "pretrain", "optimizer": )" +
            optimizer + R"(}, "batch": {"global_batch_size": 8, "sequence_length": 4096}, "parallel": {"fsdp": {"shard": 8, "offload": ")" +
            offload + R"("}}})",
        false});
  };
  CHECK_NOTHROW(load(R"({"kind": "adamw", "implementation": "foreach"})", "none"));
  CHECK_THROWS_WITH(load(R"({"kind": "sgd", "implementation": "foreach"})", "none"),
                    doctest::Contains("/training/optimizer/implementation"));
  CHECK_THROWS_WITH(load(R"({"kind": "adamw", "implementation": "foreach"})", "optimizer"),
                    doctest::Contains("/training/optimizer/implementation"));
}
