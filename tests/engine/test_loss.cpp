// SPDX-License-Identifier: MIT
// The full loss's two implementations (loss.implementation): the kernels and bytes of PyTorch's
// eager F.cross_entropy(logits.float()), and the FP32 intermediates it holds at the step's peak.
#include <doctest/doctest.h>

#include <string>

#include "../graph/graph_test_util.hpp"
#include "core/json_input.hpp"
#include "cost/cost_model.hpp"
#include "engine/engine.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;
using test::Plan;

namespace {

// Llama 3.1 8B on one H200 with every layer recomputed: the logits (8,192 x 128,256) dwarf the
// rest of the transient tensors, so the HBM peak is in the loss.
Plan one_gpu_llama(const std::string& implementation) {
  Plan p = test::one_gpu("llama-3.1-8b", 8192);
  p.recompute = "full";
  p.loss = R"({"kind": "full", "implementation": ")" + implementation + "\"}";
  return p;
}

const Op& op_named(const Program& p, const std::string& name) {
  for (const Op& op : p.ops) {
    if (p.name_of(op) == name) return op;
  }
  FAIL("no op " << name);
  return p.ops.front();
}

}  // namespace

TEST_CASE("eager loss: 3 kernels forward and 4 backward with the bytes of the cast, log-softmax and NLL") {
  const Scenario eager = test::scenario(one_gpu_llama("eager"));
  const Scenario fused = test::scenario(one_gpu_llama("fused"));
  const StepGraph eager_graph = build_step_graph(eager);
  const StepGraph fused_graph = build_step_graph(fused);
  const Program& e = eager_graph.programs.at(0);
  const Program& f = fused_graph.programs.at(0);
  const double t = 8192, n = t * 128256;

  const Op& fwd = op_named(e, "loss.cross_entropy");
  CHECK(fwd.num_kernels == 3);
  // The BF16 logits cast, then the FP32 copy's log-softmax: a 128,256-class row (501 KiB) does not
  // fit in shared memory, so it is read three times (max, sum of exponentials, output).
  CHECK(fwd.bytes_read == n * (2 + 3 * 4) + t * 4);
  CHECK(fwd.bytes_written == n * 8 + t * 4);      // the FP32 copy and log-probabilities, the loss
  const Op& bwd = op_named(e, "loss.cross_entropy.bwd");
  CHECK(bwd.num_kernels == 4);
  CHECK(bwd.bytes_read == n * 12);                // log-softmax backward (8), the cast back (4)
  CHECK(bwd.bytes_written == n * (8 + 2));        // zero-fill, log-softmax gradient, BF16 gradient
  CHECK(op_named(e, "lm_head").bytes_written == n * 2);  // BF16 logits
  CHECK(op_named(e, "lm_head").flops == op_named(f, "lm_head").flops);

  CHECK(op_named(f, "loss.cross_entropy").num_kernels == 1);
  CHECK(op_named(f, "loss.cross_entropy.bwd").num_kernels == 1);
  CHECK(op_named(f, "lm_head").bytes_written == n * 4);  // FP32 logits from the GEMM
}

TEST_CASE("eager loss: a row that fits in shared memory is read once by the log-softmax") {
  // The dense calibration slice: 32,768 classes, a 128 KiB FP32 row.
  const Scenario s = load_scenario(read_input("scenarios/trace/dense-s8k-mb1.json", "scenarios", "SCENARIO"));
  REQUIRE(s.spec.loss.implementation == LossImplementation::eager);
  const StepGraph g = build_step_graph(s);
  const double t = 8192, n = t * 32768;
  CHECK(op_named(g.programs.at(0), "loss.cross_entropy").bytes_read == n * (2 + 4) + t * 4);
}

TEST_CASE("eager loss: the peak holds the log-probabilities and both FP32 gradients, 12 bytes a logit") {
  auto run = [](const std::string& implementation) {
    const Scenario s = test::scenario(one_gpu_llama(implementation));
    const StepGraph g = build_step_graph(s);
    const CostModel cost(s.hardware);
    const StepResult r = Engine(g, cost).run({});
    REQUIRE(r.complete);
    const Program& p = g.programs.at(0);
    return std::pair{r.memory.at(0), p.name_of(p.ops.at(r.memory.at(0).peak_op))};
  };
  const double n = 8192.0 * 128256;
  const auto logits = static_cast<size_t>(MemCategory::logits);
  const auto [eager, eager_peak_op] = run("eager");
  const auto [fused, fused_peak_op] = run("fused");
  CHECK(eager_peak_op == "loss.cross_entropy.bwd");
  CHECK(eager.peak_transient[logits] == n * 12);
  CHECK(fused_peak_op == "lm_head.bwd");  // the FP32 logits (their gradient in place) and dx
  CHECK(fused.peak_transient[logits] == n * 4);
  // The rest of what is live at the two peaks is the same but for the head's input gradient
  // (8,192 x 4,096 BF16), which the fused peak holds: before the allocator's reserve, which follows
  // the slab, the eager loss needs 8 bytes a logit more, less dx.
  const double dx = 8192.0 * 4096 * 2;
  CHECK(eager.peak_hbm_bytes - eager.allocator_reserve_bytes - (fused.peak_hbm_bytes - fused.allocator_reserve_bytes) ==
        doctest::Approx(n * 8 - dx).epsilon(1e-9));
}

TEST_CASE("loss.implementation eager only with the full loss") {
  Plan p = one_gpu_llama("eager");
  p.loss = R"({"kind": "cce", "vocab_chunk": 8192, "implementation": "eager"})";
  CHECK_THROWS_WITH(test::scenario(p), doctest::Contains("/loss/implementation"));
}
