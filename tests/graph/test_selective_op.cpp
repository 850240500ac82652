// SPDX-License-Identifier: MIT
// recompute.policy selective_op, torchtitan's per-op selective activation checkpointing: a layer keeps
// its BF16 matmuls' outputs but every second one (q, v, w1 and w2 of a Llama layer; k, o and w3
// recomputed) and its attention core's, and recomputes the rest; with FP8 matmuls
// (torchao's _scaled_mm, not in torchtitan's save list) every matmul the backward reaches is recomputed.
// Megatron-style
// selective recomputes the attention core and no matmul.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "analysis/known_fusions.hpp"
#include "graph/graph_checks.hpp"

using namespace moesim;

namespace {

// Layer 1's ops of micro-batch 0 in `phase`, by name without the layer prefix.
std::set<std::string> layer_ops(const StepGraph& g, Phase phase, OpKind kind) {
  std::set<std::string> out;
  const Program& p = g.programs[0];
  for (const Op& op : p.ops) {
    if (op.phase == phase && op.layer == 1 && op.micro == 0 && op.kind == kind) {
      const std::string& name = p.name_of(op);
      out.insert(name.substr(name.find('.') + 1));
    }
  }
  return out;
}

double layer_flops(const StepGraph& g, Phase phase, OpKind kind) {
  double f = 0;
  for (const Op& op : g.programs[0].ops) {
    if (op.phase == phase && op.layer == 1 && op.micro == 0 && op.kind == kind) f += op.flops;
  }
  return f;
}

// The phases of the ops that free the buffers named `name`.
std::set<Phase> freed_in(const StepGraph& g, const std::string& name) {
  std::set<Phase> out;
  const Program& p = g.programs[0];
  for (const Op& op : p.ops) {
    for (const MemEffect& e : p.effects_of(op)) {
      if (e.action == MemAction::free && p.names[p.buffers[e.buffer].name] == name) out.insert(op.phase);
    }
  }
  return out;
}

StepGraph llama(const std::string& recompute, const std::string& precision = "{}") {
  test::Plan p = test::one_gpu("llama-3.1-8b", 4096);
  p.recompute = recompute;
  p.precision = precision;
  StepGraph g = build_step_graph(test::scenario(p));
  CHECK(check_step_graph(g).empty());
  return g;
}

}  // namespace

TEST_CASE("selective_op recomputes every second BF16 matmul and keeps the attention core") {
  const StepGraph g = llama("selective_op");
  // The layer's calls: q 1, k 2, v 3, o 4, w1 (gate) 5, w3 (up) 6, w2 (down) 7.
  CHECK(layer_ops(g, Phase::fwd, OpKind::gemm) == std::set<std::string>{"attn.q_proj", "attn.k_proj", "attn.v_proj",
                                                                        "attn.o_proj", "ffn.gate_proj", "ffn.up_proj",
                                                                        "ffn.down_proj"});
  CHECK(layer_ops(g, Phase::recompute, OpKind::gemm) ==
        std::set<std::string>{"attn.k_proj", "attn.o_proj", "ffn.up_proj"});
  CHECK(layer_ops(g, Phase::recompute, OpKind::flash_attention).empty());
  CHECK(layer_ops(g, Phase::recompute, OpKind::norm) == std::set<std::string>{"attn_norm", "ffn_norm"});
  CHECK(layer_ops(g, Phase::recompute, OpKind::activation) == std::set<std::string>{"ffn.act"});
  // Megatron-style selective: the attention core and the cheap ops, no matmul.
  const StepGraph s = llama("selective");
  CHECK(layer_ops(s, Phase::recompute, OpKind::gemm).empty());
  CHECK(layer_ops(s, Phase::recompute, OpKind::flash_attention) == std::set<std::string>{"attn.flash_attention"});
}

TEST_CASE("selective_op keeps w1's output and not w3's: the gated FFN's two halves apart") {
  // Under any other policy the gated up-projection is one GEMM of both halves, with the same
  // forward FLOPs as the two apart.
  const StepGraph split = llama("selective_op");
  const StepGraph fused = llama("none");
  CHECK(layer_ops(fused, Phase::fwd, OpKind::gemm).count("ffn.gate_proj") == 0);
  CHECK(layer_flops(split, Phase::fwd, OpKind::gemm) == doctest::Approx(layer_flops(fused, Phase::fwd, OpKind::gemm)));
  // w3 is recomputed: 2 x tokens x d x intermediate of the recompute is its.
  const double half_up = 2.0 * 4096 * 4096 * 14336;
  const double k_and_o = 2.0 * 4096 * 4096 * (1024 + 4096);  // k: 8 heads x 128; o: 4096
  CHECK(layer_flops(split, Phase::recompute, OpKind::gemm) == doctest::Approx(half_up + k_and_o).epsilon(1e-12));
  // Kept from the forward to the backward: w1's output, not w3's (freed by the activation, made
  // again by the recompute).
  CHECK(freed_in(split, "layer1.ffn.gate_proj.out") == std::set<Phase>{Phase::bwd});
  CHECK(freed_in(split, "layer1.ffn.up_proj.out") == std::set<Phase>{Phase::fwd});
  CHECK(freed_in(split, "layer1.recompute.ffn.up_proj.out") == std::set<Phase>{Phase::bwd});
  CHECK(freed_in(fused, "layer1.ffn.up_proj.out") == std::set<Phase>{Phase::bwd});
}

TEST_CASE("selective_op with FP8 matmuls recomputes all of them") {
  const StepGraph bf16 = llama("selective_op");
  const StepGraph fp8 = llama("selective_op", R"({"compute": "fp8", "quantization": "tensorwise"})");
  std::set<std::string> all = layer_ops(fp8, Phase::fwd, OpKind::gemm);
  CHECK(all.size() == 7);
  // Every matmul the backward reaches again: not the down-projection, whose output only the residual
  // add reads and whose backward needs nothing of it (checkpointing stops once the backward's needs
  // are recomputed).
  all.erase("ffn.down_proj");
  CHECK(layer_ops(fp8, Phase::recompute, OpKind::gemm) == all);
  const double down = 2.0 * 4096 * 14336 * 4096;  // tokens x intermediate x d
  CHECK(layer_flops(fp8, Phase::recompute, OpKind::gemm) ==
        doctest::Approx(layer_flops(fp8, Phase::fwd, OpKind::gemm) - down).epsilon(1e-12));
  CHECK(layer_flops(bf16, Phase::recompute, OpKind::gemm) < layer_flops(bf16, Phase::fwd, OpKind::gemm) / 2);
}

TEST_CASE("selective_op treats a TP-overlapped projection's pieces as its one matmul call") {
  test::Plan p = test::dense_tp8();
  p.model = "llama-3.1-8b";
  p.recompute = "selective_op";
  p.tp_comm_overlap = "chunked";
  const StepGraph g = build_step_graph(test::scenario(p));
  CHECK(check_step_graph(g).empty());
  // k is the layer's 2nd call and up_proj (w3) its 6th: recomputed with every piece. o, the 4th,
  // is not: the residual add reads the reduce-scatter's output, which is kept, as without the
  // overlap - the rest piece it joins orders it and is not read again.
  const std::set<std::string> got = layer_ops(g, Phase::recompute, OpKind::gemm);
  CHECK(got == std::set<std::string>{"attn.k_proj", "attn.k_proj.last_chunk", "ffn.up_proj", "ffn.up_proj.last_chunk"});
}

TEST_CASE("TP overlap keeps what the unsplit layer keeps under each selective policy") {
  for (const std::string policy : {"selective", "selective_op"}) {
    CAPTURE(policy);
    test::Plan p = test::dense_tp8();
    p.model = "llama-3.1-8b";
    p.recompute = policy;
    const StepGraph off = build_step_graph(test::scenario(p));
    p.tp_comm_overlap = "chunked";
    const StepGraph on = build_step_graph(test::scenario(p));
    CHECK(kept_activation_bytes(on.programs[0]) == doctest::Approx(kept_activation_bytes(off.programs[0])).epsilon(1e-12));
    // The rest pieces' outputs, which only order their consumers, end in the forward: never kept
    // for a recompute.
    const Program& prog = on.programs[0];
    int64_t rest_outputs = 0;
    for (const Op& op : prog.ops) {
      for (const MemEffect& e : prog.effects_of(op)) {
        const Buffer& b = prog.buffers[e.buffer];
        if (e.action != MemAction::free || b.category != MemCategory::activation ||
            !prog.names[b.name].ends_with(".rest.out")) {
          continue;
        }
        ++rest_outputs;
        CHECK(op.phase == Phase::fwd);
      }
    }
    CHECK(rest_outputs > 0);
    // The same recompute FLOPs: a recomputed projection recomputes all its pieces.
    CHECK(layer_flops(on, Phase::recompute, OpKind::gemm) ==
          doctest::Approx(layer_flops(off, Phase::recompute, OpKind::gemm)).epsilon(1e-12));
  }
}
