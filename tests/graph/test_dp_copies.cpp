// SPDX-License-Identifier: MIT
// FSDP2's copies and gradient accumulation (graph/dp_copies.hpp) against hand-computed bytes, and
// the step graph's copy ops per unit and micro-batch: where they sit, what they wait for, which
// plans have them.
#include <algorithm>
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "core/json_input.hpp"
#include "graph/dp_copies.hpp"
#include "graph/graph_checks.hpp"
#include "graph/queues.hpp"
#include "graph_test_util.hpp"
#include "model/accounting.hpp"

using namespace moesim;
using test::Plan;

namespace {

// N = 1000 parameters, T = 600 trainable; bf16 gathered, fp32 master, reduction and gradients.
const DpFormats kMixed{Dtype::bf16, Dtype::fp32, Dtype::fp32, Dtype::fp32};

void check_bytes(const CopyBytes& c, double read, double written) {
  CHECK(c.read == doctest::Approx(read));
  CHECK(c.written == doctest::Approx(written));
}

// Every FSDP copy op of a program by its name with the layer prefix dropped, and micro-batch.
std::map<std::pair<std::string, int32_t>, std::vector<const Op*>> copies_of(const Program& p, int32_t layer) {
  std::map<std::pair<std::string, int32_t>, std::vector<const Op*>> out;
  for (const Op& op : p.ops) {
    if (op.layer != layer || (op.kind != OpKind::dp_copy && op.kind != OpKind::grad_accumulate)) continue;
    const std::string name = p.name_of(op);
    out[{name.substr(name.find('.') + 1), op.micro}].push_back(&op);
  }
  return out;
}

}  // namespace

TEST_CASE("all-gather copies: the trainable shard cast, the shard copied in, the gathered buffer copied out") {
  const GatherCopies four = fsdp2_gather_copies(DpPart{1000, 600, 4}, kMixed);
  // cast 150 x (4 -> 2) + copy-in 250 x (2 -> 2); copy-out 1000 x (2 -> 2)
  check_bytes(four.copy_in, 150 * 4 + 250 * 2, 150 * 2 + 250 * 2);
  check_bytes(four.copy_out, 2000, 2000);
  // One rank: no collective, no copy-out; the cast and copy fill the unsharded parameters.
  const GatherCopies one = fsdp2_gather_copies(DpPart{1000, 600, 1}, kMixed);
  check_bytes(one.copy_in, 600 * 4 + 1000 * 2, 600 * 2 + 1000 * 2);
  CHECK(one.copy_out.empty());
  // Frozen weights (LoRA's base) are stored as gathered: copied, never cast.
  check_bytes(fsdp2_gather_copies(DpPart{1000, 0, 4}, kMixed).copy_in, 500, 500);
  // No mixed precision: nothing to cast.
  const DpFormats fp32{Dtype::fp32, Dtype::fp32, Dtype::fp32, Dtype::fp32};
  check_bytes(fsdp2_gather_copies(DpPart{1000, 600, 4}, fp32).copy_in, 1000, 1000);
}

TEST_CASE("reduction copies every micro-batch: copy-in widened to fp32, the shard accumulated from the second") {
  const DpPart part{1000, 600, 4};
  const ReduceCopies first = fsdp2_reduce_copies(part, kMixed, GradStep{true, true, false});
  CHECK(first.unsharded_accumulate.empty());
  check_bytes(first.copy_in, 600 * 2, 600 * 4);
  CHECK(first.single_rank_copy.empty());
  CHECK(first.sharded_update.empty());  // the first reduced shard becomes the gradient as it is
  const ReduceCopies second = fsdp2_reduce_copies(part, kMixed, GradStep{true, false, false});
  check_bytes(second.copy_in, 600 * 2, 600 * 4);
  check_bytes(second.sharded_update, 2 * 150 * 4, 150 * 4);  // shard += reduced
  // One rank copies the input to the output in place of the reduce-scatter.
  check_bytes(fsdp2_reduce_copies(DpPart{1000, 600, 1}, kMixed, GradStep{}).single_rank_copy, 600 * 4, 600 * 4);
  // A bf16 reduction into fp32 gradients casts the reduced shard first.
  const DpFormats bf16_reduce{Dtype::bf16, Dtype::fp32, Dtype::bf16, Dtype::fp32};
  const ReduceCopies cast = fsdp2_reduce_copies(part, bf16_reduce, GradStep{true, false, false});
  check_bytes(cast.copy_in, 600 * 2, 600 * 2);
  check_bytes(cast.sharded_update, 150 * 2 + 2 * 150 * 4, 150 * 4 + 150 * 4);
  // Nothing trainable, nothing to do.
  const ReduceCopies frozen = fsdp2_reduce_copies(DpPart{1000, 0, 4}, kMixed, GradStep{true, false, false});
  CHECK((frozen.copy_in.empty() && frozen.sharded_update.empty() && frozen.unsharded_accumulate.empty()));
}

TEST_CASE("reduction once per step: the unsharded gradients widened once, then accumulated, then reduced") {
  const DpPart part{1000, 600, 4};
  const ReduceCopies cast = fsdp2_reduce_copies(part, kMixed, GradStep{false, true, false});
  check_bytes(cast.unsharded_accumulate, 600 * 2, 600 * 4);
  CHECK(cast.copy_in.empty());
  const ReduceCopies add = fsdp2_reduce_copies(part, kMixed, GradStep{false, false, false});
  check_bytes(add.unsharded_accumulate, 600 * (4 + 2), 600 * 4);
  const ReduceCopies last = fsdp2_reduce_copies(part, kMixed, GradStep{true, false, true});
  check_bytes(last.unsharded_accumulate, 600 * (4 + 2), 600 * 4);
  check_bytes(last.copy_in, 600 * 4, 600 * 4);  // from the fp32 accumulation
  CHECK(last.sharded_update.empty());
  // Reduced in the parameters' format: autograd accumulates in bf16, nothing to widen.
  const DpFormats bf16{Dtype::bf16, Dtype::fp32, Dtype::bf16, Dtype::bf16};
  CHECK(fsdp2_reduce_copies(part, bf16, GradStep{false, true, false}).unsharded_accumulate.empty());
  check_bytes(fsdp2_reduce_copies(part, bf16, GradStep{false, false, false}).unsharded_accumulate, 600 * 4, 600 * 2);
}

TEST_CASE("the traced dense slice on one GPU: per layer and micro-batch the copies FSDP2 runs over one rank") {
  // scenarios/trace/dense-s4k-mb2.json: models/calibration/llama-slice.json, 2 micro-batches.
  // A layer's parameters: q, o 2048 x 2048; k, v 2048 x 1024; up 2048 x 11264; down 5632 x 2048;
  // two norms of 2048 = 47,190,016, all trainable. The trace's FSDP::post_backward_reduce copies
  // 188,760,064 bytes per layer (N fp32) and its FSDP::pre_forward copies N bf16.
  const double n = 47'190'016;
  const Scenario s = load_scenario(read_input("scenarios/trace/dense-s4k-mb2.json", "scenarios", "SCENARIO"));
  CHECK(layer_params(s.model, 1).non_expert == static_cast<int64_t>(n));
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs[0];
  auto copies = copies_of(p, 1);
  for (int32_t micro : {0, 1}) {
    CAPTURE(micro);
    const auto& in = copies[{"fsdp_copy_in.params", micro}];
    REQUIRE(in.size() == 2);  // forward and backward (resharded after forward)
    for (const Op* op : in) {
      CHECK(op->kind == OpKind::dp_copy);
      CHECK(queue_of(*op) == kComputeQueue);
      CHECK(op->bytes_read == doctest::Approx(n * 4 + n * 2));  // cast from fp32, copy of bf16
      CHECK(op->bytes_written == doctest::Approx(n * 2 + n * 2));
    }
    REQUIRE(copies[{"fsdp_reduce_copy_in.params", micro}].size() == 1);
    CHECK(copies[{"fsdp_reduce_copy_in.params", micro}][0]->bytes_written == doctest::Approx(n * 4));
    REQUIRE(copies[{"fsdp_reduce_copy.params", micro}].size() == 1);
    CHECK(copies[{"fsdp_reduce_copy.params", micro}][0]->bytes_read == doctest::Approx(n * 4));
  }
  CHECK(copies[{"fsdp_accumulate_shard.params", 0}].empty());
  REQUIRE(copies[{"fsdp_accumulate_shard.params", 1}].size() == 1);
  CHECK(copies[{"fsdp_accumulate_shard.params", 1}][0]->kind == OpKind::grad_accumulate);
  CHECK(copies[{"fsdp_accumulate_shard.params", 1}][0]->bytes_read == doctest::Approx(8 * n));
  // Nothing is gathered over one rank: no collective at all.
  for (const Op& op : p.ops) CHECK(!is_communication(op.kind));
  CHECK(check_memory_balance(p).empty());
  CHECK(check_memory_order(p).empty());
}

TEST_CASE("FSDP2 over 8 ranks: copy-in on the all-gather's queue before it, copy-out on the compute queue after it") {
  Plan plan;  // qwen3-30b-a3b, FSDP2 over 8, 2 micro-batches
  plan.global_batch = 16;
  const Scenario s = test::scenario(plan);
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs[0];
  const double n = static_cast<double>(layer_params(s.model, 1).non_expert);
  int gathers = 0;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.kind != OpKind::all_gather || op.layer != 1 || op.group != GroupKind::fsdp) continue;
    ++gathers;
    // The copy-in just before it on its queue; one copy-out after it on the compute queue, waiting
    // for it (right after it in the forward; in the backward, where the prefetched unit is reached).
    const Op& in = p.ops[i - 1];
    CHECK(p.name_of(in) == "layer1.fsdp_copy_in.params");
    CHECK(queue_of(in) == queue_of(op));
    CHECK(in.bytes_written == doctest::Approx(n / 8 * 2 + n / 8 * 2));
    int outs = 0;
    for (uint32_t j = i + 1; j < p.ops.size(); ++j) {
      const auto deps = p.deps_of(p.ops[j]);
      if (std::find(deps.begin(), deps.end(), i) == deps.end() || p.ops[j].kind != OpKind::dp_copy) continue;
      ++outs;
      const Op& out = p.ops[j];
      CHECK(p.name_of(out) == "layer1.fsdp_copy_out.params");
      CHECK(queue_of(out) == kComputeQueue);
      CHECK(out.bytes_read == doctest::Approx(n * 2));
      if (op.phase == Phase::fwd) CHECK(j == i + 1);
    }
    CHECK(outs == 1);
  }
  CHECK(gathers == 2 * 2);  // forward and backward of 2 micro-batches
  // The reduced shard's accumulation runs on the reduce-scatter's queue, after it.
  int updates = 0;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (p.name_of(op) != "layer1.fsdp_accumulate_shard.params") continue;
    ++updates;
    CHECK(op.micro == 1);
    CHECK(queue_of(op) == 2 + static_cast<int>(GroupKind::fsdp));
    CHECK(op.bytes_written == doctest::Approx(n / 8 * 4));
  }
  CHECK(updates == 1);
}

TEST_CASE("only FSDP2 copies: ZeRO 0-2 plans have no copy op; gradient sync once per step accumulates unsharded") {
  for (int64_t stage : {0, 1, 2}) {
    Plan plan;
    plan.zero_stage = stage;
    plan.global_batch = 16;
    const StepGraph g = build_step_graph(test::scenario(plan));
    for (const Op& op : g.programs[0].ops) CHECK((op.kind != OpKind::dp_copy && op.kind != OpKind::grad_accumulate));
  }
  Plan plan;
  plan.global_batch = 32;  // 4 micro-batches
  plan.gradient_sync = "last_micro_batch";
  const StepGraph g = build_step_graph(test::scenario(plan));
  auto copies = copies_of(g.programs[0], 1);
  for (int32_t micro = 0; micro < 4; ++micro) {
    CAPTURE(micro);
    CHECK(copies[{"fsdp_accumulate_unsharded.params", micro}].size() == 1);  // a cast, then adds
    CHECK(copies[{"fsdp_reduce_copy_in.params", micro}].size() == (micro == 3 ? 1u : 0u));
    CHECK(copies[{"fsdp_accumulate_shard.params", micro}].empty());
  }
  const double n = static_cast<double>(layer_params(test::scenario(plan).model, 1).non_expert);
  // The first micro-batch widens bf16 to fp32, later ones add bf16 into fp32, the last reduces fp32.
  CHECK(copies[{"fsdp_accumulate_unsharded.params", 0}][0]->bytes_written == doctest::Approx(n * 4));
  CHECK(copies[{"fsdp_accumulate_unsharded.params", 2}][0]->bytes_read == doctest::Approx(n * 6));
  CHECK(copies[{"fsdp_reduce_copy_in.params", 3}][0]->bytes_read == doctest::Approx(n * 4));
}
