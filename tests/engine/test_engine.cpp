// SPDX-License-Identifier: MIT
// The engine against closed forms (one collective alone takes the cost model's time; two sharing
// a port take twice as long; a kernel its roofline time) and invariants on whole steps: memory
// balances, MFU <= 1, more bandwidth or FLOP/s is never slower, the same inputs give the same
// event sequence (golden fingerprints).
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "../graph/graph_test_util.hpp"
#include "engine/engine.hpp"
#include "engine/step_analysis.hpp"
#include "memory/buffer_plan.hpp"
#include "graph/graph_stats.hpp"

using namespace moesim;
using test::Plan;

namespace {

HardwareSpec h200() { return load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")); }

// A hand-built step of 2 ranks (one FSDP shard group of 2, EP 2) running `ops`.
StepGraph tiny(const std::vector<Op>& ops) {
  StepGraph g;
  g.plan = ParallelPlan(MeshShape{1, 1, 2, 1, 1, 2});
  Program p;
  ProgramWriter w(p);
  for (const Op& op : ops) w.add(op, "op");
  g.programs.push_back(std::move(p));
  g.tokens_per_micro_batch = 1;
  return g;
}

Op collective(OpKind kind, GroupKind group, double bytes) {
  Op op;
  op.kind = kind;
  op.stream = Stream::comm;
  op.group = group;
  op.comm_bytes = bytes;
  return op;
}

double seconds(Picoseconds t) { return static_cast<double>(t) * 1e-12; }

// Small whole-step plans the step-analysis tests share: MoE with expert parallelism (8 ranks,
// overlapped communication), and 2 pipeline stages of a 405B model with TP 4 (1F1B).
Plan small_moe() {
  Plan p;
  p.ep = 8;
  p.global_batch = 16;
  p.seq = 2048;
  return p;
}
Plan small_pipeline() {
  Plan p;
  p.model = "llama-3.1-405b";
  p.devices = 16;
  p.tp = 4;
  p.pp = 2;
  p.shard = 2;
  p.global_batch = 8;
  p.seq = 2048;
  return p;
}

}  // namespace

TEST_CASE("one collective alone takes latency + wire bytes / bandwidth") {
  const HardwareSpec hw = h200();
  const CostModel cost(hw);
  const StepGraph g = tiny({collective(OpKind::all_gather, GroupKind::fsdp, 1e9)});
  Engine engine(g, cost);
  const StepResult r = engine.run({});
  const double expected = cost.collective(OpKind::all_gather, 1e9, GroupPlacement{2, 1, 2}).seconds();
  CHECK(seconds(r.step_time) == doctest::Approx(expected).epsilon(1e-9));
  CHECK(expected == doctest::Approx(2e-6 + 0.5e9 / (450e9 * hw.efficiency.collective)));
}

TEST_CASE("two collectives on different communicators share each port max-min: both take twice as long") {
  const CostModel cost(h200());
  const StepGraph g = tiny({collective(OpKind::all_gather, GroupKind::fsdp, 1e9),
                            collective(OpKind::all_to_all, GroupKind::ep, 1e9)});
  Engine engine(g, cost);
  const StepResult r = engine.run({});
  const CollectiveCost one = cost.collective(OpKind::all_gather, 1e9, GroupPlacement{2, 1, 2});
  const double transfer = one.up_bytes / one.up_bandwidth;
  // Same latency and same bytes: both flows run at half rate all the way and end together.
  CHECK(seconds(r.step_time) == doctest::Approx(one.latency_s + 2 * transfer).epsilon(1e-9));
}

TEST_CASE("a kernel takes its roofline time; dependent kernels add up") {
  const CostModel cost(h200());
  Op gemm;
  gemm.kind = OpKind::gemm;
  gemm.m = gemm.n = gemm.k = 4096;
  gemm.flops = 2.0 * 4096 * 4096 * 4096;
  gemm.bytes_read = 3.0 * 4096 * 4096 * 2;
  const StepGraph g = tiny({gemm, gemm});
  Engine engine(g, cost);
  const StepResult r = engine.run({});
  CHECK(seconds(r.step_time) == doctest::Approx(2 * cost.kernel_seconds(gemm)).epsilon(1e-9));
  // Both kernels are the critical path, and it covers the whole step.
  CHECK(r.critical_path_length == 2);
  REQUIRE(r.critical_path.size() == 1);  // both are named "op"
  CHECK(r.critical_path[0].second == r.step_time);
}

TEST_CASE("whole steps: memory balances, MFU <= 1, determinism, more bandwidth never slower") {
  Plan p;  // qwen3-30b-a3b on 8 H200s, FSDP 8 + EP 8, 2 micro-batches
  p.ep = 8;
  p.global_batch = 16;
  p.seq = 2048;
  p.recompute = "selective";
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine engine(g, cost);
  EngineOptions o;
  o.record_timeline = true;
  const StepResult a = engine.run(o);
  const StepResult b = engine.run(o);
  CHECK(a.step_time == b.step_time);
  CHECK(fingerprint(a.timeline) == fingerprint(b.timeline));
  CHECK(a.step_time > 0);
  for (const RankMemory& m : a.memory) {
    CHECK(m.final_hbm_bytes == doctest::Approx(m.persistent_bytes).epsilon(1e-9));
    CHECK(m.min_hbm_bytes >= m.persistent_bytes * (1 - 1e-12));
    CHECK(m.peak_hbm_bytes >= m.persistent_bytes);
    // The peak is persistent state + the transient tensors live then + the allocator's reserve
    // over them: what the slab the tensors were placed in needs beyond them (no extra
    // fragmentation by default). Tensors live at one instant never share memory, so the slab
    // holds at least the live peak; best fit keeps the holes small here.
    double transient = 0;
    for (double bytes : m.peak_transient) transient += bytes;
    CHECK(transient > 0);
    CHECK(m.slab_bytes >= transient);
    CHECK(m.slab_bytes <= 1.25 * transient);
    CHECK(m.allocator_reserve_bytes == doctest::Approx(m.slab_bytes - transient).epsilon(1e-9));
    CHECK(m.peak_hbm_bytes == doctest::Approx(m.persistent_bytes + m.slab_bytes).epsilon(1e-12));
  }
  // The ledger's slab is plan_slab's on the engine's own op times (what the GPU executor places
  // on measured times): the same allocator fed the same timeline.
  for (int32_t rank = 0; rank < 8; ++rank) {
    CAPTURE(rank);
    const Program& prog = g.programs[static_cast<size_t>(g.plan.program_of(rank))];
    std::vector<Picoseconds> starts(prog.ops.size(), -1), ends(prog.ops.size(), -1);
    for (const ExecRecord& e : a.timeline.records) {
      if (e.rank != rank) continue;
      starts[e.op] = e.start;
      ends[e.op] = e.end;
    }
    CHECK(static_cast<double>(plan_slab(prog, starts, ends).slab_bytes) == a.memory[static_cast<size_t>(rank)].slab_bytes);
  }
  // The runtime's share of persistent memory: 1 GB + 128 MiB for each communicator used (fsdp and
  // ep; the expert-data-parallel group has one member).
  CHECK(g.programs[0].persistent.runtime == doctest::Approx(1e9 + 2 * 128.0 * (1 << 20)).epsilon(1e-12));
  const GraphStats stats = compute_stats(g);
  const double capacity = seconds(a.step_time) * 8 * 989e12;
  CHECK(stats.model_flops_per_step / capacity <= 1.0);
  CHECK(stats.flops_per_step / capacity <= 1.0);

  // The critical path never takes longer than the step.
  Picoseconds path = 0;
  for (const auto& [name, t] : a.critical_path) path += t;
  CHECK(path > 0);
  CHECK(path <= a.step_time);

  // Every op ran exactly once on every rank.
  CHECK(a.timeline.records.size() == g.programs[0].ops.size() * 8);

  // A faster machine is never slower.
  HardwareSpec fast = s.hardware;
  fast.device.peak_flops.bf16.value *= 2;
  fast.device.hbm_bandwidth.value *= 2;
  fast.fabric.scale_up.port_bandwidth.value *= 2;
  const CostModel fast_cost(fast);
  Engine fast_engine(g, fast_cost);
  CHECK(fast_engine.run({}).step_time <= a.step_time);

  // Another routing sample changes the expert loads, hence the step time a little.
  EngineOptions other;
  other.step = 1;
  const StepResult c = engine.run(other);
  CHECK(c.step_time != a.step_time);
  CHECK(std::abs(seconds(c.step_time) / seconds(a.step_time) - 1) < 0.05);
}

TEST_CASE("a straggler slows the whole step") {
  Plan p;
  p.ep = 8;
  p.seq = 2048;
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine engine(g, cost);
  const StepResult nominal = engine.run({});
  EngineOptions slow;
  slow.rank_speed.assign(8, 1.0);
  slow.rank_speed[3] = 1.5;
  const StepResult straggling = engine.run(slow);
  CHECK(straggling.step_time > nominal.step_time);
}

TEST_CASE("golden runs: step time and event fingerprint are pinned") {
  // Any change of behaviour (graph, cost, engine) moves these; update them deliberately, with the
  // reason in the commit message.
  struct Golden {
    const char* name;
    Plan plan;
    int64_t step_ps;
    uint64_t fingerprint;  // named as in fingerprint(): the event-sequence hash
  };
  const Plan dense = test::dense_tp8();
  Plan moe;
  moe.ep = 8;
  moe.global_batch = 16;
  moe.seq = 2048;
  moe.recompute = "selective";
  Plan k3 = test::k3_supernode();
  k3.lora_targets = R"(["q_proj", "o_proj", "shared_experts"])";
  k3.loss = R"({"kind": "cce", "vocab_chunk": 8192})";
  // FSDP2's copies and gradient accumulation (graph/dp_copies.hpp) moved all three: dense
  // 10.629 -> 11.269 s, moe 0.328 -> 0.385 s, k3 2.423 -> 2.706 s (copies scale with the
  // parameters, not the tokens: these plans run few tokens per rank). h200-hgx's memory-bound
  // efficiency measured (0.9 -> 0.682, then by kind, docs/hardware-efficiency.md): dense 11.269 ->
  // 11.438 s, moe 0.385 -> 0.416 s. FSDP2's backward prefetch issues a unit's all-gather before
  // the reduce-scatter of the unit after it (it had waited behind it): dense 11.438 -> 9.079 s,
  // moe 0.416 -> 0.410 s, k3 2.706 -> 2.403 s. h200-hgx's GEMM curve with GEMMs measured at the
  // power limit (max 0.815 -> 0.727): dense 9.0787 -> 9.0796 s (bound by its gathers), moe 0.410
  // -> 0.414 s. h200-hgx's overlap_slowdown 0.1 -> 0.189 (arXiv 2507.03114's average compute
  // slowdown under overlapped communication): dense 9.0796 s (+7.9 us: bound by its
  // gathers), moe 0.4137 -> 0.4177 s. Sequence parallelism gathers each TP region's input again in
  // the backward (parallel.tp.sp_backward_input gather_again): dense's events move, its step does
  // not (bound by its gathers).
  for (const Golden& gold : {Golden{"dense", dense, 9079630684326, 9204490606621758643ull},
                             Golden{"moe", moe, 417698613172, 3418245400143824495ull},
                             Golden{"k3", k3, 2403218116669, 8635773883728017868ull}}) {
    CAPTURE(gold.name);
    const Scenario s = test::scenario(gold.plan);
    const StepGraph g = build_step_graph(s);
    const CostModel cost(s.hardware);
    Engine engine(g, cost);
    EngineOptions o;
    o.record_timeline = true;
    const StepResult r = engine.run(o);
    INFO("step_ps " << r.step_time << " fingerprint " << fingerprint(r.timeline));
    CHECK(r.step_time == gold.step_ps);
    CHECK(fingerprint(r.timeline) == gold.fingerprint);
  }
}

TEST_CASE("the compute stream's time splits exactly into computing and what it waited for") {
  const Plan moe = small_moe();  // overlapped communication: idle gaps charged to the collective waited for
  Plan serial = moe;  // no overlap: collectives run on the compute stream
  serial.overlap = false;
  const Plan pipeline = small_pipeline();  // the second stage waits for activations
  for (const Plan& p : {moe, serial, pipeline}) {
    const Scenario s = test::scenario(p);
    const StepGraph g = build_step_graph(s);
    const CostModel cost(s.hardware);
    Engine engine(g, cost);
    const StepResult r = engine.run({});
    Picoseconds total = r.compute_stream_busy;
    std::map<std::string, Picoseconds> exposed(r.exposed.begin(), r.exposed.end());
    for (const auto& [cause, t] : r.exposed) total += t;
    CHECK(total == r.step_time);
    CHECK(r.compute_stream_busy < r.step_time);
    if (p.pp > 1) CHECK(exposed["pipeline_bubble"] > 0);
    if (!p.overlap) CHECK(exposed["all_to_all"] > 0);
    CHECK(!exposed.contains("other"));
  }
}

TEST_CASE("an op's start follows from its predecessors' ends: start_of gives every recorded start") {
  // The engine keeps only end times; the analyses derive starts (step_analysis.hpp). Checked on
  // whole steps with collectives, all-to-alls on their own queues, pipeline sends and receives,
  // and a host that issues ops late (issue i at i x op_issue), waiting or not for each forward
  // router (from its end on, op i is issued at max(i x op_issue + delay, router end + ...)).
  for (const double op_issue_s : {0.0, 500e-6})
  for (const bool waits : {false, true}) {
    for (const Plan& plan : {small_moe(), small_pipeline()}) {
      CAPTURE(op_issue_s);
      CAPTURE(waits);
      CAPTURE(plan.model);
      const Scenario s = test::scenario(plan);
      StepGraph g = build_step_graph(s);
      g.host_op_issue_s = op_issue_s;
      g.host_waits_for_routing = waits;
      const CostModel cost(s.hardware);
      Engine engine(g, cost);
      EngineOptions o;
      o.record_timeline = true;
      const StepResult r = engine.run(o);
      const auto ranks = static_cast<size_t>(g.plan.num_ranks());
      std::vector<ProgramIndex> index;
      for (const Program& p : g.programs) index.emplace_back(p);
      std::vector<std::vector<Picoseconds>> ended(ranks), issue_at(ranks);
      std::vector<HostDelays> delays(ranks);
      std::vector<std::vector<int32_t>> remaining(ranks);
      RunRecord run;
      run.plan = &g.plan;
      for (size_t rank = 0; rank < ranks; ++rank) {
        const auto program = static_cast<size_t>(g.plan.program_of(static_cast<int64_t>(rank)));
        const Program& p = g.programs[program];
        run.slot_rank.push_back(static_cast<int32_t>(rank));
        run.program.push_back(&p);
        run.index.push_back(&index[program]);
        ended[rank].assign(p.ops.size(), -1);
        remaining[rank].assign(p.ops.size(), kOpDone);
        for (size_t i = 0; i < p.ops.size(); ++i) issue_at[rank].push_back(static_cast<Picoseconds>(i) * std::llround(op_issue_s * 1e12));
      }
      for (const ExecRecord& e : r.timeline.records) ended[static_cast<size_t>(e.rank)][e.op] = e.end;
      // The host resumes after each forward router at its end: from the next op on, every issue
      // moves by the largest such lag so far.
      int64_t waited = 0;
      for (size_t rank = 0; rank < ranks; ++rank) {
        const Program& p = *run.program[rank];
        delays[rank] = {{0, 0}};
        for (uint32_t i = 0; waits && i + 1 < p.ops.size(); ++i) {
          if (p.ops[i].kind != OpKind::router || p.ops[i].phase == Phase::bwd) continue;
          const Picoseconds lag = ended[rank][i] - issue_at[rank][i + 1];
          if (lag > delays[rank].back().second) delays[rank].emplace_back(i + 1, lag);
          ++waited;
        }
        run.issue_at.push_back(&issue_at[rank]);
        run.host_delays.push_back(&delays[rank]);
      }
      if (waits && plan.model == small_moe().model) {
        CHECK(waited > 0);
        // A host that costs nothing resumes late at every router (a slow one may be behind anyway).
        if (op_issue_s == 0) CHECK(delays[0].size() > 1);
      }
      run.ended = &ended;
      run.remaining = &remaining;
      REQUIRE(r.timeline.records.size() > 0);
      int64_t checked = 0, host_bound = 0;
      for (const ExecRecord& e : r.timeline.records) {
        const Picoseconds derived = start_of(run, e.rank, e.op);
        if (derived != e.start) {
          CAPTURE(e.rank);
          CAPTURE(e.op);
          CHECK(derived == e.start);
        }
        ++checked;
        if (op_issue_s > 0 && e.start == issued_at(run, e.rank, e.op) && e.start > 0) ++host_bound;
      }
      CHECK(checked == static_cast<int64_t>(r.timeline.records.size()));
      if (op_issue_s > 0) CHECK(host_bound > 0);  // the host-issue term of start_of is exercised
    }
  }
}

TEST_CASE("a swap copy shares the scale-up port with a collective when host memory sits behind it") {
  HardwareSpec hw = h200();
  const CollectiveCost gather = CostModel(hw).collective(OpKind::all_gather, 1e9, GroupPlacement{2, 1, 2});
  const double transfer = gather.up_bytes / gather.up_bandwidth;
  // The copy starts its transfer with the collective and moves as long alone.
  hw.device.host_memory.latency.value = gather.latency_s;
  const double copy_bandwidth = hw.device.host_memory.bandwidth.value * hw.efficiency.host_copy;
  Op copy;
  copy.kind = OpKind::swap_out;
  copy.stream = Stream::copy;
  copy.comm_bytes = transfer * copy_bandwidth;
  const StepGraph g = tiny({collective(OpKind::all_gather, GroupKind::fsdp, 1e9), copy});

  const CostModel apart(hw);
  CHECK(seconds(Engine(g, apart).run({}).step_time) == doctest::Approx(gather.latency_s + transfer).epsilon(1e-9));

  // Over the scale-up fabric the copy takes w = copy / port bandwidth of the port: max-min gives
  // both 1 / (1 + w) of their full rate, so both end after (1 + w) times as long.
  hw.device.host_memory.over_scale_up = true;
  const CostModel shared(hw);
  const double w = copy_bandwidth / (hw.fabric.scale_up.port_bandwidth.value * hw.efficiency.collective);
  CHECK(seconds(Engine(g, shared).run({}).step_time) == doctest::Approx(gather.latency_s + transfer * (1 + w)).epsilon(1e-9));
}

TEST_CASE("an oversubscribed switch tier slows the transfers that cross it, and only those") {
  HardwareSpec hw = h200();
  const CollectiveCost alone = CostModel(hw).collective(OpKind::all_to_all, 1e9, GroupPlacement{2, 1, 2});
  const double transfer = alone.up_bytes / alone.up_bandwidth;
  const StepGraph g = tiny({collective(OpKind::all_to_all, GroupKind::ep, 1e9)});
  auto step = [&](const HardwareSpec& h, bool distinct) {
    const CostModel cost(h);
    EngineOptions o;
    o.distinct_ranks = distinct;
    return seconds(Engine(g, cost).run(o).step_time);
  };
  // A non-blocking tier spanning both devices: the ports remain the bottleneck.
  hw.fabric.scale_up.tiers = {SwitchTierSpec{"node", 2, hw.fabric.scale_up.port_bandwidth, Seconds{0}}};
  CHECK(step(hw, false) == doctest::Approx(alone.latency_s + transfer).epsilon(1e-9));
  // Each device behind its own switch with half the port's bandwidth upward: all the traffic
  // crosses it, so the flow runs at half rate, also when one rank stands for both.
  SwitchTierSpec half{"leaf", 1, hw.fabric.scale_up.port_bandwidth, Seconds{0}};
  half.bandwidth_per_device.value /= 2;
  hw.fabric.scale_up.tiers = {half, SwitchTierSpec{"node", 2, hw.fabric.scale_up.port_bandwidth, Seconds{0}}};
  CHECK(step(hw, false) == doctest::Approx(alone.latency_s + 2 * transfer).epsilon(1e-9));
  CHECK(step(hw, true) == doctest::Approx(alone.latency_s + 2 * transfer).epsilon(1e-9));
}

TEST_CASE("max-min sharing meets its definition in every reshare of whole steps") {
  // Overlapping FSDP gathers, all-to-alls, swap copies over a unified bus, an oversubscribed
  // switch tier: no resource over capacity, every throttled flow bottlenecked where it is among
  // the fastest.
  Plan moe;
  moe.ep = 8;
  moe.global_batch = 16;
  moe.seq = 2048;
  moe.recompute = "full";
  moe.swap = true;
  for (const Plan& p : {moe, test::k3_supernode()}) {
    Scenario s = test::scenario(p);
    s.hardware.device.host_memory.over_scale_up = true;
    SwitchTierSpec leaf{"leaf", 1, s.hardware.fabric.scale_up.port_bandwidth, Seconds{0}};
    leaf.bandwidth_per_device.value *= 0.6;
    s.hardware.fabric.scale_up.tiers.insert(s.hardware.fabric.scale_up.tiers.begin(), leaf);
    const StepGraph g = build_step_graph(s);
    const CostModel cost(s.hardware);
    Engine engine(g, cost);
    for (bool distinct : {false, true}) {
      EngineOptions o;
      o.check_max_min = true;
      o.distinct_ranks = distinct;
      const StepResult r = engine.run(o);
      CAPTURE(distinct);
      CHECK(r.max_min_checks > 1000);
      CHECK(r.max_min_violations == 0);
    }
  }
}

TEST_CASE("FSDP prefetch: 0 gathers a unit only when it is reached, exposing its gathers") {
  Plan p;  // qwen3-30b-a3b over 8 H200s, FSDP2 8
  p.global_batch = 8;
  p.seq = 2048;
  auto exposed_gathers = [&](int64_t prefetch) {
    Scenario s = test::scenario(p);
    s.spec.parallel.fsdp.prefetch = prefetch;
    const StepGraph g = build_step_graph(s);
    const StepResult r = Engine(g, CostModel(s.hardware)).run({});
    Picoseconds t = 0;
    for (const auto& [cause, ps] : r.exposed) t += cause == "all_gather" ? ps : 0;
    return std::pair{r.step_time, t};
  };
  const auto [none_step, none_exposed] = exposed_gathers(0);
  const auto [one_step, one_exposed] = exposed_gathers(1);
  CHECK(none_step > one_step);
  CHECK(none_exposed > one_exposed);
}

TEST_CASE("the breakdown is the rank that ends the step (the lowest-numbered of several), exact and non-negative") {
  Plan p;  // skewed routing: EP ranks carry different loads
  p.ep = 8;
  p.global_batch = 16;
  p.seq = 2048;
  p.routing = R"({"distribution": "skewed", "skew": 1.2})";
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  for (const bool distinct : {false, true}) {
    CAPTURE(distinct);
    EngineOptions o;
    o.distinct_ranks = distinct;
    const StepResult r = Engine(g, cost).run(o);
    CHECK(r.rank_end[static_cast<size_t>(r.slowest_rank)] == r.step_time);
    for (int32_t rank = 0; rank < r.slowest_rank; ++rank) CHECK(r.rank_end[static_cast<size_t>(rank)] < r.step_time);
    Picoseconds total = r.compute_stream_busy;
    for (const auto& [cause, t] : r.exposed) {
      CAPTURE(cause);
      CHECK(t >= 0);
      total += t;
    }
    CHECK(total == r.step_time);
  }
}

TEST_CASE("the memory timeline's reserved bytes peak at the report's peak HBM, live bytes at the live peak") {
  Plan p;
  p.ep = 8;
  p.global_batch = 16;
  p.seq = 2048;
  p.allocator_fragmentation = 0.05;
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  EngineOptions o;
  o.record_timeline = true;
  const StepResult r = Engine(g, cost).run(o);
  double reserved = 0, live = 0;
  for (const MemorySample& m : r.timeline.memory) {
    REQUIRE(m.rank == 0);
    CHECK(m.hbm_reserved_bytes >= m.hbm_bytes);
    reserved = std::max(reserved, m.hbm_reserved_bytes);
    live = std::max(live, m.hbm_bytes);
  }
  const RankMemory& m = r.memory[0];
  CHECK(m.allocator_reserve_bytes > 0);
  CHECK(reserved == m.peak_hbm_bytes);
  CHECK(live == doctest::Approx(m.peak_hbm_bytes - m.allocator_reserve_bytes).epsilon(1e-12));
}

TEST_CASE("hidden dropout: each residual add keeps a 1-byte mask per element until its backward; full recompute drops them") {
  // Llama-3.1-405B, TP 8 with sequence parallelism: 256 of 2,048 tokens a rank, hidden 16,384,
  // 126 layers of two residual adds: 126 x 2 x 256 x 16,384 x 1 B = 1.06 GB of masks at the peak,
  // where the forward ends and every mask is still held.
  Plan p = test::dense_tp8();
  p.global_batch = 2;
  // The gathered inputs held to the backward keep the peak where the forward ends; with them
  // gathered again (Megatron's way) the peak falls in the backward, after some masks are freed.
  p.sp_backward_input = "keep_gathered";
  auto run = [&](const std::string& recompute, double dropout) {
    Plan q = p;
    q.recompute = recompute;
    Scenario s = test::scenario(q);
    s.spec.training.hidden_dropout = dropout;
    const StepGraph g = build_step_graph(s);
    int64_t masks = 0;
    for (const Op& op : g.programs[0].ops) {
      const std::string& name = g.programs[0].name_of(op);
      if (op.phase == Phase::fwd && name.ends_with("residual_add") && op.num_outputs == 2) ++masks;
    }
    const CostModel cost(s.hardware);
    return std::make_pair(Engine(g, cost).run({}), masks);
  };
  const auto [plain, none] = run("none", 0);
  const auto [dropout, forward_masks] = run("none", 0.1);
  const auto [recomputed, recomputed_masks] = run("full", 0.1);
  const auto [recomputed_plain, unused] = run("full", 0);
  CHECK(none == 0);
  CHECK(forward_masks == 126 * 2);  // one a residual add, micro-batch 1 of 1 on this rank
  const double masks = 126.0 * 2 * 256 * 16384;
  const double grown = dropout.memory[0].peak_hbm_bytes - plain.memory[0].peak_hbm_bytes;
  CHECK(grown > 0.95 * masks);
  CHECK(grown < 1.1 * masks);
  // The masks' bytes, on the compute stream (this plan's step is bound by FSDP2's gathers over the
  // network, which hide the compute's difference from the step time).
  CHECK(dropout.compute_stream_busy > plain.compute_stream_busy);
  // Under full recompute a layer's masks exist only while it runs again in backward.
  CHECK(recomputed.memory[0].peak_hbm_bytes - recomputed_plain.memory[0].peak_hbm_bytes < 0.05 * masks);
  CHECK(recomputed_masks >= forward_masks);
}

TEST_CASE("materialised attention costs time and memory flash does not; dropout adds its mask; selective recompute drops them") {
  Plan p = test::dense_tp8();  // Llama-3.1-405B, TP 8: 16 heads of 2,048 x 2,048 probabilities a layer
  p.recompute = "none";
  p.seq = 2048;
  p.global_batch = 2;
  auto run = [&](const std::string& fused, const std::string& recompute, double dropout) {
    Plan q = p;
    q.fused = fused;
    q.recompute = recompute;
    q.precision = "{}";
    Scenario s = test::scenario(q);
    s.spec.training.attention_dropout = dropout;
    const StepGraph g = build_step_graph(s);
    const CostModel cost(s.hardware);
    return Engine(g, cost).run({});
  };
  const StepResult flash = run("{}", "none", 0);
  const StepResult plain = run(R"({"flash_attention": false})", "none", 0);
  const StepResult dropout = run(R"({"flash_attention": false})", "none", 0.1);
  const StepResult selective = run(R"({"flash_attention": false})", "selective", 0.1);
  // Compute-stream time: the step of this plan is bound by FSDP2's gathers over the network.
  CHECK(plain.compute_stream_busy > flash.compute_stream_busy);
  // Probabilities of every layer kept: 126 layers x 16 x 2048^2 x 2 B = 16.9 GB more than flash at least.
  const double probs = 126.0 * 16 * 2048 * 2048 * 2;
  CHECK(plain.memory[0].peak_hbm_bytes - flash.memory[0].peak_hbm_bytes > 0.9 * probs);
  CHECK(dropout.memory[0].peak_hbm_bytes - plain.memory[0].peak_hbm_bytes > 0.9 * probs * 1.5);  // kept copy + int8 mask
  CHECK(selective.memory[0].peak_hbm_bytes < plain.memory[0].peak_hbm_bytes - 0.9 * probs);
  CHECK(selective.compute_stream_busy > dropout.compute_stream_busy);  // the core runs again in backward
}
