// SPDX-License-Identifier: MIT
// Swap against the plans it sits between: for every swap target, a step with the target's outputs
// swapped (full recompute otherwise) is never faster than one that keeps every activation in HBM
// and recomputes nothing; if it is faster than recomputing, it copied something to host memory;
// and a target with nothing to copy changes nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "engine/engine.hpp"

using namespace moesim;
using test::Plan;

namespace {

struct Outcome {
  Picoseconds step = 0;
  double ddr = 0;
  int64_t swap_outs = 0;
};

Outcome simulate(const Plan& p) {
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const StepResult r = Engine(g, CostModel(s.hardware)).run({});
  Outcome o;
  o.step = r.step_time;
  for (const RankMemory& m : r.memory) o.ddr = std::max(o.ddr, m.peak_ddr_bytes);
  for (const Op& op : g.programs[0].ops) o.swap_outs += op.kind == OpKind::swap_out;
  return o;
}

}  // namespace

TEST_CASE("swapping an op's outputs costs their copies, or changes nothing") {
  struct Case {
    const char* model;
    int64_t ep;
    const char* target;
    const char* mode;
  };
  for (const Case& c : {Case{"qwen3-30b-a3b", 8, "attention_in_proj", "pretrain"},
                        Case{"qwen3-30b-a3b", 8, "attention_in_proj", "lora"},
                        Case{"qwen3-30b-a3b", 8, "attention_out_proj", "pretrain"},
                        Case{"qwen3-30b-a3b", 8, "expert_gmm_up", "pretrain"},
                        Case{"qwen3-30b-a3b", 8, "expert_gmm_down", "pretrain"},
                        Case{"deepseek-v3", 8, "shared_expert_up", "lora"},
                        Case{"mixtral-8x7b", 8, "expert_gmm_down", "lora"},
                        Case{"llama-3.1-405b", 1, "dense_ffn_up", "lora"}}) {
    const std::string name = std::string(c.model) + " " + c.target + " " + c.mode;
    CAPTURE(name);
    Plan keep;  // every activation kept, nothing recomputed
    keep.model = c.model;
    keep.devices = 8;
    keep.shard = 8;
    keep.ep = c.ep;
    keep.tp = std::string(c.model).starts_with("llama") ? 8 : 1;
    keep.shard = 8 / keep.tp;
    keep.global_batch = keep.shard;
    keep.seq = 2048;
    keep.mode = c.mode;
    keep.lora_targets = R"(["o_proj"])";
    Plan recompute = keep;
    recompute.recompute = "full";
    Plan swap = recompute;
    swap.swap = true;
    swap.swap_ops = std::string("[\"") + c.target + "\"]";
    const Outcome kept = simulate(keep);
    const Outcome recomputed = simulate(recompute);
    const Outcome swapped = simulate(swap);
    CHECK(swapped.step >= kept.step);
    if (swapped.step < recomputed.step) CHECK(swapped.ddr > 0);
    if (swapped.swap_outs == 0) CHECK(swapped.step == recomputed.step);
  }
}

TEST_CASE("LoRA on the routed experts keeps their swap: the frozen base output is copied for the adapter's recompute") {
  Plan p;  // qwen3-30b-a3b over 8 H200s, FSDP2 8 + EP8
  p.ep = 8;
  p.global_batch = 8;
  p.seq = 2048;
  p.mode = "lora";
  p.lora_targets = R"(["o_proj", "routed_experts"])";
  p.recompute = "full";
  p.swap = true;
  p.swap_ops = R"(["expert_gmm_up"])";
  const Outcome o = simulate(p);
  CHECK(o.swap_outs > 0);
  CHECK(o.ddr > 0);
}
