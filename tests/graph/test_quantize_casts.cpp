// SPDX-License-Identifier: MIT
// FP8 casts (graph/quantize_casts.hpp, docs/modelling.md#fp8-casts): the table per recipe, where
// the graph puts the casts, and what the cost model charges for them.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "cost/cost_model.hpp"
#include "graph/quantize_casts.hpp"
#include "graph_test_util.hpp"

using namespace moesim;
using test::Plan;

namespace {

// Llama 3.1 8B (d 4096, 8 KV heads of 128, f 14336) on 8 GPUs, FSDP2 8, two micro-batches of
// 4,096 tokens.
Plan llama(const std::string& precision) {
  Plan p;
  p.model = "llama-3.1-8b";
  p.hardware = "h100-hgx";
  p.global_batch = 16;
  p.seq = 4096;
  p.precision = precision;
  return p;
}

struct Seen {
  int32_t kernels = 0;
  double cast_bytes = 0;
};

// Layer 1's ops of one name by (phase, micro-batch).
std::map<std::pair<Phase, int32_t>, Seen> ops_named(const StepGraph& g, const std::string& name) {
  std::map<std::pair<Phase, int32_t>, Seen> out;
  const Program& p = g.programs[0];
  for (const Op& op : p.ops) {
    const std::string n(p.name_of(op));
    if (n == name || n == name + ".bwd") out[{op.phase, op.micro}] = {op.num_kernels, op.cast_bytes};
  }
  return out;
}

constexpr double kT = 4096, kD = 4096, kQ = 4096;  // q_proj: T x d in, d x q weight, T x q out

}  // namespace

TEST_CASE("the casts of each recipe: torchao's roofline rows, nothing at 16 bits") {
  struct Row {
    QuantizationCasts recipe;
    CastWork act, weight;
  };
  const double a = 2, q = 1;
  const Row rows[] = {
      {QuantizationCasts::tensorwise, {{3, 2 * a, 2 * q}, {0, 0, 0}}, {{3, 2 * a, q}, {1, a, q}}},
      {QuantizationCasts::rowwise, {{2, 2 * a, 2 * q + a}, {0, 0, 0}}, {{1, a, q}, {2, 2 * a, a + q}}},
      {QuantizationCasts::one_pass, {{1, a, 2 * q}, {0, 0, 0}}, {{1, a, q}, {1, a, q}}},
      {QuantizationCasts::fused, {}, {}},
  };
  auto same = [](const KernelPass& x, const KernelPass& y) {
    CHECK(x.num_kernels == y.num_kernels);
    CHECK(x.read_per_element == y.read_per_element);
    CHECK(x.written_per_element == y.written_per_element);
  };
  for (const Row& r : rows) {
    CAPTURE(enum_name(r.recipe));
    const CastWork x = cast_work(r.recipe, CastOperand::activation, Dtype::bf16, Dtype::fp8);
    const CastWork w = cast_work(r.recipe, CastOperand::weight, Dtype::bf16, Dtype::fp8);
    same(x.fwd, r.act.fwd);
    same(x.bwd, r.act.bwd);
    same(w.fwd, r.weight.fwd);
    same(w.bwd, r.weight.bwd);
    // FP4 writes half a byte per element and layout (rowwise's transposed copy stays BF16); BF16
    // compute has no casts.
    const double unquantised_copy = r.recipe == QuantizationCasts::rowwise ? a : 0;
    CHECK(cast_work(r.recipe, CastOperand::activation, Dtype::bf16, Dtype::fp4).fwd.written_per_element ==
          (r.act.fwd.written_per_element - unquantised_copy) / 2 + unquantised_copy);
    CHECK(cast_work(r.recipe, CastOperand::activation, Dtype::bf16, Dtype::bf16).fwd.num_kernels == 0);
  }
}

TEST_CASE("a tensorwise FP8 linear carries its casts: input and weight forward, gradient and transposed weight backward") {
  const StepGraph g = build_step_graph(test::scenario(llama(R"({"compute": "fp8"})")));
  const auto q = ops_named(g, "layer1.attn.q_proj");
  REQUIRE(q.size() == 4);  // forward and backward of two micro-batches
  for (int32_t micro : {0, 1}) {
    CAPTURE(micro);
    const Seen f = q.at({Phase::fwd, micro});
    CHECK(f.kernels == 1 + 3 + 3);
    CHECK(f.cast_bytes == (2 * 2 + 2 * 1) * kT * kD + (2 * 2 + 1) * kD * kQ);
    const Seen b = q.at({Phase::bwd, micro});
    CHECK(b.kernels == 1 + 3 + 1);
    CHECK(b.cast_bytes == (2 * 2 + 2 * 1) * kT * kQ + (2 + 1) * kD * kQ);
  }
  // The router and the LM head stay unquantised, and BF16 has no casts anywhere.
  for (const Op& op : g.programs[0].ops) {
    if (op.cast_bytes > 0) CHECK((op.kind == OpKind::gemm && op.dtype == Dtype::fp8));
  }
  const StepGraph bf16 = build_step_graph(test::scenario(llama("{}")));
  for (const Op& op : bf16.programs[0].ops) CHECK(op.cast_bytes == 0);
}

TEST_CASE("weights gathered in FP8 are not cast again; cached weights are cast by micro-batch 0 only") {
  const auto gathered = ops_named(build_step_graph(test::scenario(llama(R"({"compute": "fp8", "params": "fp8"})"))),
                                  "layer1.attn.q_proj");
  CHECK(gathered.at({Phase::fwd, 1}).kernels == 1 + 3);
  CHECK(gathered.at({Phase::fwd, 1}).cast_bytes == 6 * kT * kD);
  CHECK(gathered.at({Phase::bwd, 1}).cast_bytes == 6 * kT * kQ);

  const auto cached = ops_named(
      build_step_graph(test::scenario(llama(R"({"compute": "fp8", "quantization": "one_pass", "cache_quantized_weights": true})"))),
      "layer1.attn.q_proj");
  CHECK(cached.at({Phase::fwd, 0}).kernels == 1 + 1 + 1);
  CHECK(cached.at({Phase::fwd, 0}).cast_bytes == 4 * kT * kD + 3 * kD * kQ);
  CHECK(cached.at({Phase::bwd, 0}).cast_bytes == 4 * kT * kQ + 3 * kD * kQ);
  CHECK(cached.at({Phase::fwd, 1}).kernels == 1 + 1);
  CHECK(cached.at({Phase::fwd, 1}).cast_bytes == 4 * kT * kD);
  CHECK(cached.at({Phase::bwd, 1}).cast_bytes == 4 * kT * kQ);
}

TEST_CASE("a recompute casts the input again; a cached weight is reused by it") {
  Plan p = llama(R"({"compute": "fp8", "quantization": "one_pass", "cache_quantized_weights": true})");
  p.recompute = "full";
  const auto q = ops_named(build_step_graph(test::scenario(p)), "layer1.attn.q_proj");
  for (int32_t micro : {0, 1}) {
    CAPTURE(micro);
    CHECK(q.at({Phase::recompute, micro}).kernels == 1 + 1);
    CHECK(q.at({Phase::recompute, micro}).cast_bytes == 4 * kT * kD);
  }
}

TEST_CASE("under sequence parallelism a gathered input is cast on its shard") {
  Plan p = llama(R"({"compute": "fp8"})");
  p.tp = 2;
  p.shard = 4;
  const auto q = ops_named(build_step_graph(test::scenario(p)), "layer1.attn.q_proj");
  // q_proj's input comes from the sequence-parallel all-gather: T x d over 2 ranks; its weight is
  // the rank's d x q/2 column half. o_proj (row-parallel) reads a local input.
  CHECK(q.at({Phase::fwd, 0}).cast_bytes == 6 * kT * kD / 2 + 5 * kD * kQ / 2);
  const auto o = ops_named(build_step_graph(test::scenario(p)), "layer1.attn.o_proj");
  CHECK(o.at({Phase::fwd, 0}).cast_bytes == 6 * kT * kQ / 2 + 5 * kQ / 2 * kD);
}

TEST_CASE("the cost model adds the casts as memory-bound kernels before the matmul") {
  const StepGraph g = build_step_graph(test::scenario(llama(R"({"compute": "fp8"})")));
  const HardwareSpec hw = load_hardware(read_input("h100-hgx", "hardware", "HARDWARE"));
  const CostModel cost(hw);
  const double bw = hw.device.hbm_bandwidth.value * hw.efficiency.memory;
  const double launch = hw.device.kernel_launch_overhead.value;
  int checked = 0;
  for (const Op& op : g.programs[0].ops) {
    if (op.cast_bytes == 0) continue;
    Op bare = op;
    bare.cast_bytes = 0;
    bare.num_kernels = 1;
    CHECK(cost.kernel_seconds(op) ==
          doctest::Approx(cost.kernel_seconds(bare) + op.cast_bytes / bw + (op.num_kernels - 1) * launch).epsilon(1e-12));
    ++checked;
  }
  CHECK(checked == 32 * 6 * 2 * 2);  // q, k, v, o, up, down; forward and backward; two micro-batches
}
