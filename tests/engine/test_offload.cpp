// SPDX-License-Identifier: MIT
// CPU offload (parallel.fsdp.offload) against closed forms: HBM's persistent state drops by
// exactly what host DDR gains; the host-to-device bytes of a step are the parameter shards times
// the gathers, the device-to-host bytes the gradient shards times the reductions, and the copies
// back the updated shards once per unit; the CPU optimizer takes its bytes over the host's
// optimizer bandwidth; every op runs; the host link decides the step when it is the bottleneck and
// does not matter when nothing is offloaded; the checker refuses what no framework runs.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "core/error.hpp"
#include "engine/engine.hpp"
#include "graph/graph_checks.hpp"

using namespace moesim;
using test::Plan;

namespace {

// A dense 48-layer model over 8 ranks, 4 micro-batches each (as test_pipeline.cpp's data-parallel
// plans), full training in BF16 with FP32 master weights, gradients, reductions and moments.
Plan dense(int64_t zero_stage, const std::string& offload) {
  Plan p;
  p.model = "tests/data/pipeline-uniform.json";
  p.devices = 8;
  p.shard = 8;
  p.zero_stage = zero_stage;
  p.global_batch = 32;
  p.seq = 2048;
  p.offload = offload;
  return p;
}

// An MoE model, EP8 over FSDP 8: the experts' shard group (edp) has one rank, so their weights
// are offloaded whole and copied without a gather.
Plan moe(const std::string& offload, const std::string& mode = "pretrain") {
  Plan p;
  p.model = "qwen3-30b-a3b";
  p.devices = 8;
  p.shard = 8;
  p.ep = 8;
  p.global_batch = 16;
  p.seq = 2048;
  p.recompute = "full";
  p.mode = mode;
  p.offload = offload;
  return p;
}

struct Run {
  Scenario scenario;
  StepGraph graph;
  StepResult result;
};

// `host_link_scale` scales the device <-> host bandwidth of the hardware file.
Run simulate(const Plan& plan, double host_link_scale = 1) {
  Scenario s = test::scenario(plan);
  s.hardware.device.host_memory.bandwidth.value *= host_link_scale;
  Run run{s, build_step_graph(s), {}};
  EngineOptions o;
  o.record_timeline = true;
  run.result = Engine(run.graph, CostModel(s.hardware)).run(o);
  return run;
}

double seconds(Picoseconds t) { return static_cast<double>(t) * 1e-12; }

struct Copies {
  int64_t num_h2d_before_gather = 0, num_d2h = 0, num_h2d_back = 0, num_gathers = 0, num_reductions = 0;
  double h2d_before_gather_bytes = 0, d2h_bytes = 0, h2d_back_bytes = 0;
};

// Program 0's offload copies and the collectives they pair with, by name.
Copies copies(const StepGraph& g) {
  Copies c;
  const Program& p = g.programs[0];
  for (const Op& op : p.ops) {
    const std::string& name = p.name_of(op);
    if (name.find(".offload_h2d.") != std::string::npos) {
      ++c.num_h2d_before_gather;
      c.h2d_before_gather_bytes += op.comm_bytes;
    } else if (name.find(".offload_d2h.") != std::string::npos) {
      ++c.num_d2h;
      c.d2h_bytes += op.comm_bytes;
    } else if (name.find(".offload_params_h2d") != std::string::npos) {
      ++c.num_h2d_back;
      c.h2d_back_bytes += op.comm_bytes;
    }
    c.num_gathers += name.find(".fsdp_all_gather.") != std::string::npos;
    c.num_reductions += op.kind == OpKind::reduce_scatter || op.kind == OpKind::all_reduce;
  }
  return c;
}

size_t ops_of_all_ranks(const StepGraph& g) {
  size_t n = 0;
  for (int64_t r = 0; r < g.plan.num_ranks(); ++r) n += g.programs[static_cast<size_t>(g.plan.program_of(r))].ops.size();
  return n;
}

}  // namespace

TEST_CASE("offload moves persistent state from HBM to host DDR byte for byte") {
  struct Case {
    Plan plan;
    const char* name;
  };
  for (const Case& c : {Case{dense(1, "optimizer"), "zero1 optimizer"}, Case{dense(2, "optimizer"), "zero2 optimizer"},
                        Case{dense(3, "optimizer"), "zero3 optimizer"}, Case{dense(3, "parameters"), "zero3 parameters"},
                        Case{moe("parameters"), "moe parameters"}, Case{moe("optimizer", "lora"), "moe lora optimizer"}}) {
    CAPTURE(c.name);
    Plan none = c.plan;
    none.offload = "none";
    const Run on = simulate(c.plan);
    const Run off = simulate(none);
    const PersistentMemory& m = on.graph.programs[0].persistent;
    const PersistentMemory& base = off.graph.programs[0].persistent;
    CHECK(base.host_total() == 0);
    CHECK(m.host_total() > 0);
    // Master weights and optimizer states always leave HBM, unchanged in size.
    CHECK(m.master_params == 0);
    CHECK(m.optimizer_states == 0);
    CHECK(m.host_master_params == doctest::Approx(base.master_params).epsilon(1e-12));
    CHECK(m.host_optimizer_states == doctest::Approx(base.optimizer_states).epsilon(1e-12));
    // Gradients and parameters: all of each part is on one side, the sum unchanged - except ZeRO-3
    // under ZeRO-Offload, which keeps a BF16 shard of the trainable weights to gather from: half
    // the FP32 master's bytes.
    CHECK(m.grads + m.host_grads == doctest::Approx(base.grads).epsilon(1e-12));
    const int64_t zero = c.plan.zero_stage;
    const bool keeps_bf16_shard = zero == 3 && c.plan.offload == "optimizer";
    const double bf16_shard = keeps_bf16_shard ? m.host_master_params / 2 : 0;
    CHECK(m.params + m.host_params == doctest::Approx(base.params + bf16_shard).epsilon(1e-12));
    if (c.plan.offload == "parameters") CHECK(m.params == 0);
    if (c.plan.offload == "optimizer") CHECK(m.host_params == 0);
    if (c.plan.model != "qwen3-30b-a3b") CHECK((zero >= 2 ? m.grads : m.host_grads) == 0);  // dense: all sharded
    // HBM drops by exactly what host DDR holds (less the kept shard), in the graph and in the
    // engine's ledger; DDR holds it all step.
    CHECK(base.total() - m.total() == doctest::Approx(m.host_total() - bf16_shard).epsilon(1e-12));
    for (size_t r = 0; r < on.result.memory.size(); ++r) {
      CAPTURE(r);
      const RankMemory& a = on.result.memory[r];
      const RankMemory& b = off.result.memory[r];
      CHECK(b.persistent_bytes - a.persistent_bytes == doctest::Approx(m.host_total() - bf16_shard).epsilon(1e-12));
      CHECK(a.persistent_ddr_bytes == m.host_total());
      CHECK(a.peak_ddr_bytes == m.host_total());  // no swap: the copies move shards, not tensors
      CHECK(b.peak_ddr_bytes == 0);
    }
  }
}

TEST_CASE("offload copies: shards times gathers host-to-device, shards times reductions device-to-host") {
  const int64_t units = 48 + 2;  // layers, the embedding and the head
  const int64_t micro = 4;
  SUBCASE("FSDP2 CPUOffloadPolicy: every gather's shard comes from the host, every reduction's goes there") {
    const Run run = simulate(dense(3, "parameters"));
    const PersistentMemory& m = run.graph.programs[0].persistent;
    const Copies c = copies(run.graph);
    CHECK(c.num_gathers == units * micro * 2);  // forward and backward of each micro-batch
    CHECK(c.num_h2d_before_gather == c.num_gathers);
    // Each gather copies its unit's whole host shard (FP32 master, as stored): twice per micro-batch.
    CHECK(c.h2d_before_gather_bytes == doctest::Approx(2.0 * micro * (m.host_params + m.host_master_params)).epsilon(1e-12));
    CHECK(c.num_reductions == units * micro);  // FSDP2 reduce-scatters every micro-batch
    CHECK(c.num_d2h == c.num_reductions);
    // The FP32 reduced shard: as many elements as the master shard, in grad_reduce's 4 bytes.
    CHECK(c.d2h_bytes == doctest::Approx(micro * m.host_master_params).epsilon(1e-12));
    CHECK(c.d2h_bytes == doctest::Approx(micro * m.host_grads).epsilon(1e-12));
    CHECK(c.num_h2d_back == 0);  // the CPU updates the host shard in place
  }
  SUBCASE("ZeRO-Offload on the distributed optimizer: once per step each way") {
    const Run run = simulate(dense(1, "optimizer"));
    const PersistentMemory& m = run.graph.programs[0].persistent;
    const Copies c = copies(run.graph);
    CHECK(c.num_h2d_before_gather == 0);  // BF16 parameters stay in HBM
    CHECK(c.num_reductions == units);
    CHECK(c.num_d2h == units);
    CHECK(c.d2h_bytes == doctest::Approx(m.host_master_params).epsilon(1e-12));
    CHECK(c.num_h2d_back == units);  // the updated BF16 shard, half the FP32 master's bytes
    CHECK(c.h2d_back_bytes == doctest::Approx(m.host_master_params / 2).epsilon(1e-12));
  }
  SUBCASE("experts nobody shards: copied whole, without a gather") {
    const Run run = simulate(moe("parameters"));
    const Program& p = run.graph.programs[0];
    int64_t expert_copies = 0, expert_gathers = 0, expert_grad_copies = 0;
    double expert_grad_bytes = 0;
    for (const Op& op : p.ops) {
      const std::string& name = p.name_of(op);
      expert_copies += name.find(".offload_h2d.experts") != std::string::npos;
      expert_gathers += name.find(".fsdp_all_gather.experts") != std::string::npos;
      if (name.find(".offload_d2h.experts") != std::string::npos) {
        ++expert_grad_copies;
        expert_grad_bytes += op.comm_bytes;
      }
    }
    CHECK(expert_gathers == 0);
    CHECK(expert_copies == 48 * 2 * 2);  // 48 MoE layers, forward and backward of 2 micro-batches
    // Their gradients, reduced by nobody, accumulate in HBM and go to the host once, complete:
    // all of HBM's persistent gradients (the rest are on the host).
    CHECK(expert_grad_copies == 48);
    CHECK(p.persistent.grads > 0);
    CHECK(expert_grad_bytes == doctest::Approx(p.persistent.grads).epsilon(1e-12));
  }
}

TEST_CASE("offload: every op runs, the graph balances its memory, the CPU step takes its bytes over the host's bandwidth") {
  for (const Plan& plan : {dense(1, "optimizer"), dense(2, "optimizer"), dense(3, "optimizer"), dense(3, "parameters"),
                           moe("parameters"), moe("optimizer", "lora")}) {
    CAPTURE(plan.zero_stage);
    CAPTURE(plan.offload);
    CAPTURE(plan.model);
    const Run run = simulate(plan);
    CHECK(check_step_graph(run.graph).empty());
    CHECK(run.result.timeline.records.size() == ops_of_all_ranks(run.graph));
    // No GPU optimizer op is left; the CPU's are timed by their bytes over the rank's share of the
    // node's CPU optimizer bandwidth.
    double bytes = 0;
    for (const Op& op : run.graph.programs[0].ops) {
      CHECK(op.kind != OpKind::optimizer);
      if (op.kind == OpKind::host_optimizer) bytes += op.bytes_read + op.bytes_written;
    }
    const HardwareSpec& hw = run.scenario.hardware;
    const double per_device = hw.device.host_memory.cpu_optimizer_bandwidth.value / static_cast<double>(hw.devices_per_node);
    std::map<OpKind, double> busy;
    for (const auto& [kind, t] : run.result.compute_busy) busy[kind] += seconds(t);
    CHECK(bytes > 0);
    CHECK(busy[OpKind::host_optimizer] == doctest::Approx(bytes / per_device).epsilon(1e-6));
    CHECK(busy[OpKind::optimizer] == 0);
  }
}

TEST_CASE("the host link sets the step when offload makes it the bottleneck, and does not matter without offload") {
  for (const Plan& plan : {dense(3, "parameters"), dense(2, "optimizer")}) {
    CAPTURE(plan.offload);
    Plan none = plan;
    none.offload = "none";
    // Without offload there is nothing on the host link: its bandwidth changes nothing.
    CHECK(simulate(none, 1).result.step_time == simulate(none, 0.01).result.step_time);
    const Run fast = simulate(plan, 1);
    const Run slow = simulate(plan, 0.01);
    const double base = seconds(simulate(none, 1).result.step_time);
    CHECK(seconds(fast.result.step_time) > base);  // copies and a CPU optimizer step are not free
    CHECK(slow.result.step_time > fast.result.step_time);
    // At 1% of the link the copies decide the step: one copy queue runs them one after another,
    // so the step is at least their bytes over the link, and at most that on top of the fast step.
    const Copies c = copies(slow.graph);
    const HostMemorySpec& host = slow.scenario.hardware.device.host_memory;
    const double link = host.bandwidth.value * slow.scenario.hardware.efficiency.host_copy;
    const double copying = (c.h2d_before_gather_bytes + c.d2h_bytes + c.h2d_back_bytes) / link;
    CHECK(seconds(slow.result.step_time) >= copying);
    CHECK(seconds(slow.result.step_time) <= copying + seconds(fast.result.step_time));
  }
}

TEST_CASE("the checker refuses offload no framework runs, naming the field") {
  auto refused = [](Plan p) -> std::string {
    try {
      test::scenario(p);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const std::string ddp = refused(dense(0, "optimizer"));
  CHECK(ddp.find("/parallel/fsdp/offload") != std::string::npos);
  CHECK(ddp.find("zero_stage 0") != std::string::npos);
  const std::string params = refused(dense(2, "parameters"));
  CHECK(params.find("/parallel/fsdp/offload") != std::string::npos);
  CHECK(params.find("zero_stage 3") != std::string::npos);
  CHECK(refused(dense(3, "everything")).find("/parallel/fsdp/offload") != std::string::npos);
  CHECK(refused(dense(3, "parameters")).empty());
}
