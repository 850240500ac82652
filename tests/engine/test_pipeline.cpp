// SPDX-License-Identifier: MIT
// Pipeline schedules and gradient synchronisation against closed forms: every op of every rank
// runs; the 1F1B and interleaved bubbles are (p - 1) / (v m) of the ideal time on uniform stages;
// step time never falls as micro-batches are added; 1F1B holds at most p micro-batches of
// activations on the first stage; a deadlocked program is an error naming where each rank waits;
// DDP and the distributed optimizer reduce gradients once per step, FSDP2 as chosen.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "../graph/graph_test_util.hpp"
#include "deadlock_graph.hpp"
#include "engine/engine.hpp"
#include "graph/graph_checks.hpp"
#include "graph/pipeline_schedule.hpp"

using namespace moesim;
using test::Plan;

namespace {

// One rank per stage of a model whose stages do equal work (tests/data/pipeline-uniform.json),
// trained in full (backward about twice the forward, as the closed form assumes). Megatron's
// distributed optimizer (ZeRO-1) keeps every micro-batch's work the same; FSDP2 (ZeRO-3) would
// add its copies, which differ between the first, middle and last micro-batch (dp_copies.hpp).
Plan uniform_pipeline(int64_t stages, int64_t virtual_stages, int64_t micro_batches) {
  Plan p;
  p.model = "tests/data/pipeline-uniform.json";
  p.devices = stages;
  p.shard = 1;
  p.zero_stage = 1;
  p.pp = stages;
  p.virtual_stages = virtual_stages;
  p.schedule = virtual_stages > 1 ? "interleaved_1f1b" : "1f1b";
  p.global_batch = micro_batches;
  p.seq = 4096;
  return p;
}

struct Run {
  StepGraph graph;
  StepResult result;
};

Run simulate(const Plan& plan, bool record = false) {
  const Scenario s = test::scenario(plan);
  Run run{build_step_graph(s), {}};
  const CostModel cost(s.hardware);
  EngineOptions o;
  o.record_timeline = record;
  run.result = Engine(run.graph, cost).run(o);
  return run;
}

size_t ops_of_all_ranks(const StepGraph& g) {
  size_t n = 0;
  for (int64_t r = 0; r < g.plan.num_ranks(); ++r) n += g.programs[static_cast<size_t>(g.plan.program_of(r))].ops.size();
  return n;
}

double seconds(Picoseconds t) { return static_cast<double>(t) * 1e-12; }

}  // namespace

TEST_CASE("pipeline schedules: every op runs, and the bubble is (p - 1) / (v m) of the ideal step") {
  for (int64_t p : {2, 4, 8}) {
    for (int64_t v : {1, 2, 3}) {
      double previous_step = 0;
      for (int64_t m : {1, 2, 4, 8, 32, 128}) {
        if (v > 1 && m % p != 0) continue;  // Megatron's interleaved schedule needs m a multiple of p
        CAPTURE(p);
        CAPTURE(v);
        CAPTURE(m);
        const Run run = simulate(uniform_pipeline(p, v, m), true);
        const StepResult& r = run.result;
        CHECK(r.timeline.records.size() == ops_of_all_ranks(run.graph));
        // The compute stream of the slowest stage: busy for the ideal time (its micro-batches and
        // the optimizer step after them), idle for the bubble.
        double optimizer = 0;
        for (const auto& [kind, t] : r.compute_busy) optimizer += kind == OpKind::optimizer ? seconds(t) : 0;
        const double busy = seconds(r.compute_stream_busy) - optimizer;
        const double bubble = (seconds(r.step_time) - seconds(r.compute_stream_busy)) / busy;
        const double expected = static_cast<double>(p - 1) / static_cast<double>(v * m);
        CHECK(bubble == doctest::Approx(expected).epsilon(0.02));
        // More micro-batches of the same size never make the step shorter.
        CHECK(seconds(r.step_time) >= previous_step);
        previous_step = seconds(r.step_time);
      }
    }
  }
}

TEST_CASE("1F1B holds at most p micro-batches of activations on the first stage, whatever m") {
  for (int64_t p : {2, 4}) {
    CAPTURE(p);
    auto activations = [&](int64_t m) {
      const Run run = simulate(uniform_pipeline(p, 1, m));
      const RankMemory& first = run.result.memory[0];
      return first.peak_hbm_bytes - first.persistent_bytes;
    };
    const double one = activations(1);
    const double deep = activations(8 * p);
    CHECK(deep == doctest::Approx(activations(4 * p)).epsilon(1e-9));  // bounded: independent of m
    // p in flight (a transient or two beside them, hence the slack below one micro-batch).
    CHECK(deep > (static_cast<double>(p) - 0.5) * one);
    CHECK(deep < (static_cast<double>(p) + 0.5) * one);
  }
}

TEST_CASE("a program that deadlocks is an error naming the op each rank waits in, never a step time") {
  const StepGraph g = test::two_stage_deadlock();
  const HardwareSpec hw = load_hardware(read_input("h200-hgx", "hardware", "HARDWARE"));
  const CostModel cost(hw);
  Engine engine(g, cost);
  try {
    engine.run({});
    FAIL("a deadlocked step must not report a step time");
  } catch (const SimulationError& e) {
    const std::string what = e.what();
    CHECK(what.find("2 of 2 simulated ranks") != std::string::npos);
    CHECK(what.find("'pp_recv.gradient' waits for rank 1 to post the matching send") != std::string::npos);
    CHECK(what.find("'pp_send.activation' waits for 'pp_recv.gradient'") != std::string::npos);
    CHECK(what.find("'pp_recv.activation' waits for rank 0 to post the matching send") != std::string::npos);
  }
}

namespace {

// Collectives of one op-name suffix in rank 0's program ("ddp_all_reduce.params", ...).
std::map<std::string, int64_t> reductions(const StepGraph& g) {
  std::map<std::string, int64_t> out;
  const Program& p = g.programs[0];
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::all_reduce && op.kind != OpKind::reduce_scatter && op.kind != OpKind::all_gather) continue;
    const std::string& name = p.name_of(op);
    out[name.substr(name.find('.') + 1)] += 1;
  }
  return out;
}

Plan data_parallel(int64_t zero_stage, const std::string& sync) {
  Plan p;
  p.model = "tests/data/pipeline-uniform.json";
  p.devices = 8;
  p.shard = 8;
  p.zero_stage = zero_stage;
  p.gradient_sync = sync;
  p.global_batch = 32;  // 4 micro-batches per rank
  p.seq = 2048;
  return p;
}

}  // namespace

TEST_CASE("gradient synchronisation: DDP and the distributed optimizer once per step, FSDP2 as chosen") {
  const int64_t units = 48 + 2;  // layers, the embedding and the head
  const int64_t micro = 4;
  {
    const StepGraph g = build_step_graph(test::scenario(data_parallel(0, "auto")));
    auto n = reductions(g);
    CHECK(n["ddp_all_reduce.params"] == units);  // once per step
    CHECK(n["fsdp_reduce_scatter.params"] == 0);
    CHECK(n["fsdp_all_gather.params"] == 0);
  }
  {
    const StepGraph g = build_step_graph(test::scenario(data_parallel(1, "auto")));
    auto n = reductions(g);
    CHECK(n["fsdp_reduce_scatter.params"] == units);  // once per step
    CHECK(n["fsdp_all_gather.params"] == units);      // updated parameters, once per step
  }
  {
    const StepGraph g = build_step_graph(test::scenario(data_parallel(3, "auto")));
    auto n = reductions(g);
    CHECK(n["fsdp_reduce_scatter.params"] == units * micro);   // FSDP2's default: every micro-batch
    CHECK(n["fsdp_all_gather.params"] == units * micro * 2);  // forward and backward of each
  }
  {
    const StepGraph g = build_step_graph(test::scenario(data_parallel(3, "last_micro_batch")));
    CHECK(reductions(g)["fsdp_reduce_scatter.params"] == units);
  }
  {
    Plan p = data_parallel(0, "every_micro_batch");
    CHECK(reductions(build_step_graph(test::scenario(p)))["ddp_all_reduce.params"] == units * micro);
  }
}

TEST_CASE("without DP overlap the reductions follow the backward and the gathers the optimizer, back to back") {
  // Megatron-LM without --overlap-grad-reduce / --overlap-param-gather, DeepSpeed's pipeline
  // engine: the step is the compute, then every reduction, the optimizer, then every gather.
  for (int64_t zero : {0, 1, 2}) {
    CAPTURE(zero);
    const std::string sync = zero == 2 ? "last_micro_batch" : "auto";  // ZeRO-2's auto reduces every micro-batch
    Plan plan = data_parallel(zero, sync);
    plan.overlap_grad_reduce = false;
    plan.overlap_param_gather = zero == 0;  // DDP has no parameter gather to move
    const Run run = simulate(plan, true);
    const StepResult& r = run.result;
    REQUIRE(r.timeline.records.size() == ops_of_all_ranks(run.graph));
    Picoseconds backward_end = 0, optimizer_end = 0, first_reduce = INT64_MAX, last_reduce = 0, first_gather = INT64_MAX,
                last_gather = 0, reduce_busy = 0, gather_busy = 0;
    int64_t reduces = 0, gathers = 0;
    for (const ExecRecord& rec : r.timeline.records) {
      if (rec.rank != 0) continue;
      const Program& prog = run.graph.programs[static_cast<size_t>(rec.program)];
      const Op& op = prog.ops[rec.op];
      const std::string& name = prog.name_of(op);
      if (name.ends_with("_all_reduce.params") || name.ends_with("reduce_scatter.params")) {
        ++reduces;
        first_reduce = std::min(first_reduce, rec.start);
        last_reduce = std::max(last_reduce, rec.end);
        reduce_busy += rec.end - rec.start;
      } else if (name.ends_with("all_gather.params")) {
        ++gathers;
        first_gather = std::min(first_gather, rec.start);
        last_gather = std::max(last_gather, rec.end);
        gather_busy += rec.end - rec.start;
      } else if (!is_communication(op.kind) && op.phase == Phase::bwd) {
        backward_end = std::max(backward_end, rec.end);
      } else if (!is_communication(op.kind) && op.phase == Phase::optimizer) {
        optimizer_end = std::max(optimizer_end, rec.end);
      }
    }
    CHECK(reduces == 48 + 2);  // once per unit
    CHECK(first_reduce >= backward_end);
    CHECK(last_reduce - first_reduce == reduce_busy);  // one queue, no gap: all were ready at once
    if (zero == 0) {
      CHECK(gathers == 0);
      CHECK(r.step_time == optimizer_end);
    } else {
      CHECK(gathers == 48 + 2);
      CHECK(first_gather >= optimizer_end);
      CHECK(last_gather - first_gather == gather_busy);
      CHECK(r.step_time == last_gather);
    }
    // Overlapped (the default), the step is shorter by at least part of that communication.
    const Run overlapped = simulate(data_parallel(zero, sync));
    CHECK(overlapped.result.step_time < r.step_time);
  }
}

TEST_CASE("the distributed optimizer's overlapped gathers start with the step on every stage, back to back") {
  // Megatron-Core's align_param_gather: no stage waits for its first forward to issue them, so
  // they do not add up along the pipeline's fill.
  Plan plan = uniform_pipeline(4, 1, 16);
  plan.devices = 8;  // the distributed optimizer over 2 data-parallel ranks per stage
  plan.shard = 2;
  const Run run = simulate(plan, true);
  const StepResult& r = run.result;
  REQUIRE(r.timeline.records.size() == ops_of_all_ranks(run.graph));
  for (int32_t rank = 0; rank < 8; ++rank) {
    CAPTURE(rank);
    Picoseconds first = INT64_MAX, last = 0, busy = 0;
    int64_t gathers = 0;
    for (const ExecRecord& rec : r.timeline.records) {
      const Program& prog = run.graph.programs[static_cast<size_t>(rec.program)];
      if (rec.rank != rank || !prog.name_of(prog.ops[rec.op]).ends_with("all_gather.params")) continue;
      ++gathers;
      first = std::min(first, rec.start);
      last = std::max(last, rec.end);
      busy += rec.end - rec.start;
    }
    CHECK(gathers > 0);
    CHECK(first == 0);
    CHECK(last - first == busy);
  }
}

TEST_CASE("persistent state per rank follows the ZeRO stage: 2 + 4 + 4 + 8 bytes per parameter, sharded stage by stage") {
  // Full training in BF16 with FP32 master weights, gradients and AdamW moments (the defaults).
  const Scenario s0 = test::scenario(data_parallel(0, "auto"));
  const double n = static_cast<double>(build_step_graph(s0).programs[0].persistent.master_params) / 4;  // every parameter
  const double d = 8;
  for (int64_t zero = 0; zero <= 3; ++zero) {
    CAPTURE(zero);
    const PersistentMemory m = build_step_graph(test::scenario(data_parallel(zero, "auto"))).programs[0].persistent;
    const double params = zero >= 3 ? 0 : 2 * n;  // FSDP2 keeps no BF16 copy of trainable weights
    CHECK(m.params == doctest::Approx(params).epsilon(1e-12));
    CHECK(m.master_params == doctest::Approx(4 * n / (zero >= 1 ? d : 1)).epsilon(1e-12));
    CHECK(m.grads == doctest::Approx(4 * n / (zero >= 2 ? d : 1)).epsilon(1e-12));
    CHECK(m.optimizer_states == doctest::Approx(8 * n / (zero >= 1 ? d : 1)).epsilon(1e-12));
  }
}

TEST_CASE("FSDP2 syncing only the last micro-batch holds the unsharded gradients across micro-batches") {
  const Run every = simulate(data_parallel(3, "every_micro_batch"), true);
  const Run last = simulate(data_parallel(3, "last_micro_batch"), true);
  const double held = last.result.memory[0].peak_hbm_bytes - every.result.memory[0].peak_hbm_bytes;
  // At the peak, the last backward holds every unit's full FP32 gradients instead of one unit's.
  const double full_grads = last.graph.programs[0].persistent.grads * 8;  // sharded over 8
  CHECK(held > 0.8 * full_grads);
  CHECK(held < full_grads);
  // One reduce-scatter per unit and step instead of one per unit and micro-batch, all of them run.
  // (The step is not faster here: the reductions were hidden under the backward, and accumulating
  // the unsharded FP32 gradients costs the compute stream more than they did.)
  auto reduce_scatters = [](const Run& run) {
    int64_t n = 0;
    for (const ExecRecord& rec : run.result.timeline.records) {
      const Program& prog = run.graph.programs[static_cast<size_t>(rec.program)];
      n += rec.rank == 0 && prog.ops[rec.op].kind == OpKind::reduce_scatter;
    }
    return n;
  };
  const int64_t units = 48 + 2;
  CHECK(reduce_scatters(every) == units * 4);
  CHECK(reduce_scatters(last) == units);
}

TEST_CASE("FSDP2's backward prefetch: a unit's all-gather runs before the reduce-scatter of the unit after it") {
  // Units L+1 then L in the backward: L+1's pre-backward hook issues L's all-gather, its
  // post-backward hook L+1's reduce-scatter, so on the one data-parallel queue the gather goes
  // first and overlaps L+1's backward. (Issued in program order, the gather waited for L+1's
  // whole reduce-scatter and the backward for the gather.)
  const Run run = simulate(data_parallel(3, "every_micro_batch"), true);
  std::map<std::tuple<int32_t, int32_t, bool>, ExecRecord> dp;  // (micro, layer, is gather) in the backward
  std::map<std::pair<int32_t, int32_t>, Picoseconds> backward_end;  // (micro, layer): its last compute op's end
  for (const ExecRecord& rec : run.result.timeline.records) {
    if (rec.rank != 0) continue;
    const Program& prog = run.graph.programs[static_cast<size_t>(rec.program)];
    const Op& op = prog.ops[rec.op];
    if (op.phase != Phase::bwd) continue;
    const std::string& name = prog.name_of(op);
    if (name.ends_with("fsdp_all_gather.params")) dp[{op.micro, op.layer, true}] = rec;
    if (name.ends_with("fsdp_reduce_scatter.params")) dp[{op.micro, op.layer, false}] = rec;
    if (queue_of(op) == kComputeQueue) {
      auto& end = backward_end[{op.micro, op.layer}];
      end = std::max(end, rec.end);
    }
  }
  // Every unit (48 layers, the embedding and the head) gathered and reduced in each micro-batch's backward.
  CHECK(dp.size() == 4 * 50 * 2);
  for (int32_t micro = 0; micro < 4; ++micro) {
    for (int32_t layer = 1; layer < 48; ++layer) {
      CAPTURE(micro);
      CAPTURE(layer);
      const ExecRecord& gather = dp.at({micro, layer, true});
      const ExecRecord& reduce = dp.at({micro, layer + 1, false});
      CHECK(gather.end <= reduce.start);
      CHECK(gather.start < backward_end.at({micro, layer + 1}));  // under the unit after it
    }
  }
}

TEST_CASE("FSDP2 under a pipeline without resharding after forward gathers each unit once per step") {
  // Two stages, each an FSDP2 group of 2; 4 micro-batches, so that 1F1B has two in flight on the
  // first stage. PyTorch's pipelining keeps the unsharded parameters from the first forward to the
  // last backward: one all-gather per unit and step, one copy whatever the micro-batches in flight.
  Plan plan = uniform_pipeline(2, 1, 8);
  plan.devices = 4;
  plan.shard = 2;
  plan.zero_stage = 3;
  plan.reshard = false;
  const int64_t micro = 4;
  const Run kept = simulate(plan);
  plan.reshard = true;
  const Run resharded = simulate(plan);
  REQUIRE(kept.graph.num_micro_batches == micro);
  for (const Run* run : {&kept, &resharded}) {
    for (const Program& p : run->graph.programs) {
      std::map<int32_t, int64_t> gathers;  // per unit
      for (const Op& op : p.ops) {
        if (op.kind == OpKind::all_gather && op.group == GroupKind::fsdp) ++gathers[op.layer];
      }
      REQUIRE(!gathers.empty());
      for (const auto& [layer, n] : gathers) {
        CAPTURE(layer);
        // Resharded: a gather before each micro-batch's forward and another before its backward.
        CHECK(n == (run == &kept ? 1 : 2 * micro));
      }
    }
  }
  // At the peak the stage holds each unit's copy once ("UNIT.gathered.*"), beside at most one
  // gather's staging output ("UNIT.all_gather_output.*"); a copy per micro-batch in flight would
  // hold two of every unit on the first stage.
  for (size_t rank = 0; rank < kept.result.memory.size(); ++rank) {
    const Program& p = kept.graph.programs[static_cast<size_t>(kept.graph.plan.program_of(static_cast<int64_t>(rank)))];
    double one_copy = 0, staging = 0;
    for (const Buffer& b : p.buffers) {
      if (b.category != MemCategory::gathered_params) continue;
      if (p.names[b.name].find(".gathered.") != std::string::npos) one_copy += b.bytes;
      else staging = std::max(staging, b.bytes);
    }
    CAPTURE(rank);
    const double held = kept.result.memory[rank].peak_transient[static_cast<size_t>(MemCategory::gathered_params)];
    CHECK(held >= one_copy * (1 - 1e-12));
    CHECK(held <= (one_copy + staging) * (1 + 1e-12));
  }
}

TEST_CASE("uneven pipeline layouts: the counts of layers per chunk decide each stage's work") {
  Plan even = uniform_pipeline(4, 1, 8);
  Plan uneven = even;
  uneven.layers_per_chunk = "[9, 13, 13, 13]";  // Megatron-style: a lighter first stage
  const Run a = simulate(even);
  const Run b = simulate(uneven);
  auto layers_of = [](const Program& p) {
    std::set<int32_t> layers;
    for (const Op& op : p.ops) {
      if (op.layer >= 1 && op.layer <= 48) layers.insert(op.layer);
    }
    return layers;
  };
  CHECK(layers_of(b.graph.programs[0]).size() == 9);
  CHECK(*layers_of(b.graph.programs[1]).begin() == 10);
  CHECK(layers_of(b.graph.programs[3]).size() == 13);
  // The slowest stage sets the pace: 13 layers instead of 12.
  CHECK(seconds(b.result.step_time) > seconds(a.result.step_time));
  // Empty first chunk: the embedding alone on stage 0 (layouts that give it a stage).
  Plan embedding_alone = even;
  embedding_alone.layers_per_chunk = "[0, 16, 16, 16]";
  const Run c = simulate(embedding_alone);
  CHECK(layers_of(c.graph.programs[0]).empty());
  CHECK(c.result.step_time > 0);
}

TEST_CASE("ZB-H1: the bubble shrinks to (p - 1)(F + B - W), every op runs, memory as 1F1B's") {
  for (int64_t p : {2, 4, 8}) {
    for (int64_t m : {8, 32}) {
      CAPTURE(p);
      CAPTURE(m);
      Plan zb = uniform_pipeline(p, 1, m);
      zb.schedule = "zb_h1";
      const Run run = simulate(zb, true);
      const StepResult& r = run.result;
      CHECK(r.timeline.records.size() == ops_of_all_ranks(run.graph));
      // The slowest stage's forward (F), input-gradient (B) and weight-gradient (W) time.
      double f = 0, b = 0, wgrad = 0, optimizer = 0;
      for (const ExecRecord& rec : r.timeline.records) {
        if (rec.rank != r.slowest_rank || rec.stream != Stream::compute) continue;
        const Program& prog = run.graph.programs[static_cast<size_t>(rec.program)];
        const Op& op = prog.ops[rec.op];
        if (is_communication(op.kind)) continue;
        const double t = seconds(rec.end - rec.start);
        if (op.phase == Phase::fwd) {
          f += t;
        } else if (op.phase == Phase::optimizer) {
          optimizer += t;
        } else if (prog.name_of(op).ends_with(".wgrad")) {
          wgrad += t;
        } else {
          b += t;
        }
      }
      REQUIRE(wgrad > 0);
      const double ideal = f + b + wgrad;
      const double bubble = (seconds(r.step_time) - ideal - optimizer) / ideal;
      const double expected = static_cast<double>(p - 1) * (f + b - wgrad) / static_cast<double>(m) / ideal;
      CHECK(bubble == doctest::Approx(expected).epsilon(0.02));
      const Run one_f_one_b = simulate(uniform_pipeline(p, 1, m));
      CHECK(r.step_time < one_f_one_b.result.step_time);
      CHECK(r.memory[0].peak_hbm_bytes == doctest::Approx(one_f_one_b.result.memory[0].peak_hbm_bytes).epsilon(0.02));
    }
  }
}

namespace {

// A reference for a schedule on uniform stages: each rank runs its actions in order, each taking
// its pass's time; a forward starts once the previous stage's forward of that micro-batch ended,
// a backward once the next stage's backward of it ended; transfers take no time. Returns the time
// each rank ends its last pass.
std::vector<double> reference_schedule(int64_t stages, int64_t micros, double f, double b, double w) {
  std::vector<std::vector<Action>> actions;
  for (int64_t r = 0; r < stages; ++r) actions.push_back(dualpipe_schedule(r, stages, micros, true));
  auto stage_of = [&](int64_t rank, int64_t chunk) { return chunk == 0 ? rank : stages - 1 - rank; };
  std::map<std::tuple<Pass, int64_t, int64_t>, double> done;  // (pass, model stage, micro) -> end
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<double> clock(static_cast<size_t>(stages), 0.0);
  std::vector<std::vector<bool>> held(static_cast<size_t>(stages));
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < stages; ++r) {
      auto& k = next[static_cast<size_t>(r)];
      auto& t = clock[static_cast<size_t>(r)];
      while (k < actions[static_cast<size_t>(r)].size()) {
        const Action& a = actions[static_cast<size_t>(r)][k];
        if (a.pass == Pass::weight) {
          t += w;
        } else {
          const int64_t s = stage_of(r, a.chunk);
          const bool forward = a.pass == Pass::forward;
          const int64_t from = forward ? s - 1 : s + 1;
          double ready = t;
          if (from >= 0 && from < stages) {
            auto it = done.find({a.pass, from, a.micro});
            if (it == done.end()) break;
            ready = std::max(ready, it->second);
          }
          t = ready + (forward ? f : a.defer_weights ? b : b + w);
          done[{a.pass, s, a.micro}] = t;
        }
        ++k;
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < stages; ++r) REQUIRE(next[static_cast<size_t>(r)] == actions[static_cast<size_t>(r)].size());
  return clock;
}

bool is_mirror_or_optimizer(const Program& p, const Op& op) {
  return op.phase == Phase::optimizer || p.name_of(op).find(".dualpipe_mirror_grad.") != std::string::npos;
}

}  // namespace

TEST_CASE("DualPipe: every op runs, and each rank ends its passes when the schedule's recurrence says") {
  for (int64_t p : {2, 4, 8}) {
    for (int64_t m : {2 * p, 4 * p, int64_t{32}}) {
      CAPTURE(p);
      CAPTURE(m);
      Plan dual = uniform_pipeline(p, 1, m);
      dual.schedule = "dualpipe";
      const Run run = simulate(dual, true);
      const StepResult& r = run.result;
      const std::vector<std::string> problems = check_step_graph(run.graph);
      for (const auto& x : problems) MESSAGE(x);
      CHECK(problems.empty());  // p2p pairs match channel by channel, memory balances
      CHECK(r.timeline.records.size() == ops_of_all_ranks(run.graph));
      // Per pass of one chunk, from a middle rank's compute ops: F, B (input gradients) and W
      // (weight gradients); a backward that keeps its weight gradients takes B + W.
      const auto rank = static_cast<int32_t>(p / 2);
      double f = 0, b = 0, w = 0;
      std::vector<double> last_pass_end(static_cast<size_t>(p), 0.0);
      for (const ExecRecord& rec : r.timeline.records) {
        const Program& prog = run.graph.programs[static_cast<size_t>(rec.program)];
        const Op& op = prog.ops[rec.op];
        if (rec.stream != Stream::compute || is_communication(op.kind) || is_mirror_or_optimizer(prog, op)) continue;
        double& end = last_pass_end[static_cast<size_t>(rec.rank)];
        end = std::max(end, seconds(rec.end));
        if (rec.rank != rank) continue;
        const double t = seconds(rec.end - rec.start);
        (op.phase == Phase::fwd ? f : prog.name_of(op).ends_with(".wgrad") ? w : b) += t;
      }
      // Every pass on the rank: m forwards, m backwards, and the held-back weight gradients of
      // some backwards (their count is the number of weight passes).
      const std::vector<Action> actions = dualpipe_schedule(rank, p, m, true);
      const auto weight_passes =
          static_cast<double>(std::count_if(actions.begin(), actions.end(), [](const Action& a) { return a.pass == Pass::weight; }));
      const double mm = static_cast<double>(m);
      const double w_chunk = w / weight_passes;
      const double b_chunk = (b + w) / mm - w_chunk;  // input-gradient part of one backward
      const std::vector<double> expected = reference_schedule(p, m, f / mm, b_chunk, w_chunk);
      for (int64_t k = 0; k < p; ++k) {
        CAPTURE(k);
        CHECK(last_pass_end[static_cast<size_t>(k)] == doctest::Approx(expected[static_cast<size_t>(k)]).epsilon(0.01));
      }
    }
  }
}

TEST_CASE("DualPipe holds two stages' weights and at most p + 1 micro-batches of activations per rank") {
  for (int64_t p : {2, 4}) {
    CAPTURE(p);
    Plan dual = uniform_pipeline(p, 1, 4 * p);
    dual.schedule = "dualpipe";
    const Run d = simulate(dual);
    const Run one = simulate(uniform_pipeline(p, 1, 1));  // one micro-batch through 1F1B
    const Run plain = simulate(uniform_pipeline(p, 1, 4 * p));
    for (int64_t r = 0; r < p; ++r) {
      CAPTURE(r);
      // Rank r holds stage r and stage p-1-r: the weights of both, as 1F1B's ranks r and p-1-r.
      const PersistentMemory& mine = d.graph.programs[static_cast<size_t>(r)].persistent;
      const PersistentMemory& a = plain.graph.programs[static_cast<size_t>(r)].persistent;
      const PersistentMemory& b = plain.graph.programs[static_cast<size_t>(p - 1 - r)].persistent;
      CHECK(mine.params == doctest::Approx(a.params + b.params).epsilon(1e-12));
      CHECK(mine.optimizer_states == doctest::Approx(a.optimizer_states + b.optimizer_states).epsilon(1e-12));
      const double chunk = one.result.memory[static_cast<size_t>(r)].peak_hbm_bytes - one.result.memory[static_cast<size_t>(r)].persistent_bytes;
      const RankMemory& m = d.result.memory[static_cast<size_t>(r)];
      CHECK(m.peak_hbm_bytes - m.persistent_bytes < (static_cast<double>(p) + 1.5) * chunk);
    }
  }
}

TEST_CASE("DualPipe's two copies of a stage sum their gradients: one exchange of each unit's gradient shard") {
  Plan dual = uniform_pipeline(4, 1, 8);
  dual.schedule = "dualpipe";
  dual.devices = 16;
  dual.shard = 4;  // FSDP2 over 4: the exchange carries the reduce-scattered shard
  dual.zero_stage = 3;
  dual.global_batch = 32;
  const Run run = simulate(dual, true);
  CHECK(run.result.timeline.records.size() == ops_of_all_ranks(run.graph));
  const Run plain = simulate([&] {
    Plan p = dual;
    p.schedule = "1f1b";
    return p;
  }());
  for (int64_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    const Program& prog = run.graph.programs[static_cast<size_t>(r)];
    double sent = 0, received = 0;
    for (const Op& op : prog.ops) {
      if (prog.name_of(op).find(".dualpipe_mirror_grad.") == std::string::npos) continue;
      CHECK(op.peer_offset == 3 - 2 * r);  // rank p-1-r
      (op.kind == OpKind::send ? sent : received) += op.comm_bytes;
    }
    // The fp32 gradient shards of both stages the rank holds: what the stages' optimizers update.
    const PersistentMemory& a = plain.graph.programs[static_cast<size_t>(r)].persistent;
    const PersistentMemory& b = plain.graph.programs[static_cast<size_t>(3 - r)].persistent;
    CHECK(sent == doctest::Approx(a.grads + b.grads).epsilon(1e-9));
    CHECK(received == doctest::Approx(sent).epsilon(1e-12));
  }
}

TEST_CASE("DualPipe's overlapped forward and backward hide one micro-batch's all-to-all under the other's compute") {
  Plan plan;  // Qwen3-30B-A3B, EP 4 x 2 stages on 8 H200s
  plan.devices = 8;
  plan.shard = 4;
  plan.ep = 4;
  plan.pp = 2;
  plan.zero_stage = 1;
  plan.schedule = "dualpipe";
  plan.global_batch = 64;  // 16 micro-batches: 13 of each rank's 16 backwards run overlapped
  const Run overlapped = simulate(plan, true);
  plan.overlap_forward_backward = false;
  const Run apart = simulate(plan, true);
  CHECK(check_step_graph(overlapped.graph).empty());
  CHECK(overlapped.result.timeline.records.size() == ops_of_all_ranks(overlapped.graph));
  CHECK(apart.result.timeline.records.size() == ops_of_all_ranks(apart.graph));
  // The same ops, in another order.
  for (size_t s = 0; s < 2; ++s) CHECK(overlapped.graph.programs[s].ops.size() == apart.graph.programs[s].ops.size());
  auto exposed_all_to_all = [](const StepResult& r) {
    double t = 0;
    for (const auto& [what, ps] : r.exposed) t += what == "all_to_all" ? seconds(ps) : 0;
    return t;
  };
  MESSAGE("overlapped " << seconds(overlapped.result.step_time) << " a2a " << exposed_all_to_all(overlapped.result));
  MESSAGE("apart " << seconds(apart.result.step_time) << " a2a " << exposed_all_to_all(apart.result));
  CHECK(exposed_all_to_all(apart.result) > 0);
  CHECK(exposed_all_to_all(overlapped.result) < 0.5 * exposed_all_to_all(apart.result));
  CHECK(overlapped.result.step_time < apart.result.step_time);
}
