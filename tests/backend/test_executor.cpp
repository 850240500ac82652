// SPDX-License-Identifier: MIT
// The executor's CPU-side plans (no GPU needed): queue assignment and cross-queue waits from a
// Program, the buffer plan from memory effects, the dry run of every launch (every op of the
// shipped calibration scenarios has a kernel: K3's MLA/DSA/KDA slices, Llama's and Qwen3's GQA
// slices), the operands of the GQA, QK-norm and CCE launches, the routing plan's consistency
// across ranks.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "backend/cuda/attention/sdpa.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/executor.hpp"
#include "core/json_input.hpp"
#include "cost/cost_model.hpp"
#include "dense_mla_scenario.hpp"
#include "engine/engine.hpp"

using namespace moesim;
using namespace moesim::cuda;

namespace {

const char* const kCalibration[] = {"scenarios/calibration/k3-slice-1gpu.json", "scenarios/calibration/k3-slice-2gpu.json",
                                    "scenarios/calibration/k3-slice-1gpu-seq12k.json",
                                    "scenarios/calibration/k3-slice-1gpu-selective.json",
                                    "scenarios/calibration/llama-8b-slice-1gpu-chunked.json",
                                    "scenarios/calibration/k3-slice-2gpu-ft.json",
                                    "scenarios/calibration/llama-8b-slice-1gpu.json",
                                    "scenarios/calibration/qwen3-moe-slice-1gpu.json",
                                    "scenarios/calibration/qwen3-moe-slice-1gpu-pad.json",
                                    "scenarios/calibration/qwen3-moe-slice-2gpu.json"};
const char* const kLlama = "scenarios/calibration/llama-8b-slice-1gpu.json";
const char* const kQwen3 = "scenarios/calibration/qwen3-moe-slice-2gpu.json";

Scenario scenario(const char* file) { return load_scenario(read_input(file, "scenarios", "SCENARIO")); }

}  // namespace

TEST_CASE("queues mirror the engine's: compute, copy, one per group kind; waits only across queues") {
  for (const char* file : kCalibration) {
    CAPTURE(file);
    const Scenario s = scenario(file);
    const StepGraph g = build_step_graph(s);
    for (const Program& p : g.programs) {
      const QueuePlan q = plan_queues(p);
      REQUIRE(q.queue.size() == p.ops.size());
      std::array<int64_t, kNumQueues> last{};
      last.fill(-1);
      int64_t num_waits = 0;
      for (uint32_t i = 0; i < p.ops.size(); ++i) {
        const Op& op = p.ops[i];
        // On a group's queue: its collectives, and the copies FSDP2 runs on their streams.
        const bool on_group = is_communication(op.kind) || op.kind == OpKind::swap_in || op.kind == OpKind::swap_out ||
                              op.kind == OpKind::dp_copy || op.kind == OpKind::grad_accumulate;
        const int expect = op.stream == Stream::copy                ? kCopyQueue
                           : op.stream == Stream::comm && on_group ? 2 + static_cast<int>(op.group)
                                                                   : kComputeQueue;
        CHECK(q.queue[i] == expect);
        CHECK(q.queue_pred[i] == last[static_cast<size_t>(expect)]);
        last[static_cast<size_t>(expect)] = i;
        // Every explicit dependency is either stream order (same queue, earlier) or a wait.
        std::set<uint32_t> waits(q.waits[i].begin(), q.waits[i].end());
        CHECK(waits.size() == q.waits[i].size());
        for (uint32_t d : p.deps_of(op)) {
          REQUIRE(d < i);
          if (q.queue[d] == q.queue[i]) {
            CHECK(waits.count(d) == 0);
          } else {
            CHECK(waits.count(d) == 1);
          }
        }
        for (uint32_t w : q.waits[i]) CHECK(q.queue[w] != q.queue[i]);
        num_waits += static_cast<int64_t>(q.waits[i].size());
      }
      int64_t total = 0;
      for (int64_t n : q.num_ops) total += n;
      CHECK(total == static_cast<int64_t>(p.ops.size()));
      if (s.spec.swap.enabled || g.plan.num_ranks() > 1) CHECK(num_waits > 0);  // swap copies, collectives cross queues
      CHECK((q.num_ops[kCopyQueue] > 0) == s.spec.swap.enabled);
    }
  }
}

TEST_CASE("buffer plan: every allocation has its free; program-order peak vs the engine's transient peak") {
  for (const char* file : kCalibration) {
    CAPTURE(file);
    const Scenario s = scenario(file);
    const StepGraph g = build_step_graph(s);
    const Program& p = g.programs.front();
    const BufferPlan b = plan_buffers(p);
    size_t allocs = 0, frees = 0;
    for (size_t i = 0; i < p.ops.size(); ++i) {
      allocs += b.alloc_at_start[i].size();
      frees += b.free_at_end[i].size();
    }
    CHECK(allocs == frees);
    CHECK(allocs >= p.buffers.size());  // swapped buffers are allocated twice (forward, swap-in)
    // Each buffer: allocations and frees alternate, starting with an allocation.
    std::vector<int> state(p.buffers.size(), 0);
    for (size_t i = 0; i < p.ops.size(); ++i) {
      for (uint32_t x : b.alloc_at_start[i]) {
        CHECK(state[x] == 0);
        state[x] = 1;
      }
      for (uint32_t x : b.free_at_end[i]) {
        CHECK(state[x] == 1);
        state[x] = 0;
      }
    }
    CHECK(std::all_of(state.begin(), state.end(), [](int v) { return v == 0; }));
    // The engine's transient peak happens in simulated time order; the host issues allocations
    // and frees in program order, which puts each free at its op's position in the program rather
    // than at the op's end in time, and swap-ins and prefetches at their position rather than
    // ahead: with swap the program-order peak is lower, without it the same here.
    const CostModel cost(s.hardware);
    Engine engine(g, cost);
    EngineOptions eo;
    eo.record_timeline = true;
    const StepResult r = engine.run(eo);
    const RankMemory& m = r.memory.front();
    const double engine_transient = m.peak_hbm_bytes - m.allocator_reserve_bytes - m.persistent_bytes;
    CAPTURE(engine_transient);
    CAPTURE(b.program_order_peak_bytes);
    CHECK(b.program_order_peak_bytes > 0);
    if (s.spec.swap.enabled) {
      CHECK(b.program_order_peak_bytes < engine_transient);
    } else {
      CHECK(b.program_order_peak_bytes <= engine_transient * (1 + 1e-12));
    }
    // Replaying the effects at the engine's op times gives the engine's peak back (the replay the
    // executor applies to measured times).
    std::vector<Picoseconds> starts(p.ops.size(), -1), ends(p.ops.size(), -1);
    for (const ExecRecord& e : r.timeline.records) {
      if (e.rank != 0) continue;
      starts[e.op] = e.start;
      ends[e.op] = e.end;
    }
    REQUIRE(std::none_of(starts.begin(), starts.end(), [](Picoseconds t) { return t < 0; }));
    const auto samples = replay_memory(p, 0, m.persistent_bytes, starts, ends);
    double peak = 0;
    for (const MemorySample& x : samples) peak = std::max(peak, x.hbm_bytes);
    CHECK(peak - m.persistent_bytes == doctest::Approx(engine_transient).epsilon(1e-9));
    CHECK(samples.back().hbm_bytes == doctest::Approx(m.persistent_bytes).epsilon(1e-12));
  }
}

TEST_CASE("an unbalanced program is refused with the buffer's name") {
  Program p;
  ProgramWriter w(p);
  const uint32_t buf = w.buffer(1024, MemCategory::activation, "x");
  Op op;
  op.kind = OpKind::elementwise;
  const uint32_t i = w.add(op, "make_x");
  w.effect(i, buf, MemAction::alloc);
  CHECK_THROWS_WITH_AS(plan_buffers(p), doctest::Contains("buffer 'x' allocated by op 'make_x' is never freed"),
                       std::logic_error);
  const uint32_t j = w.add(op, "free_twice");
  w.effect(j, buf, MemAction::free);
  w.effect(j, buf, MemAction::free);
  CHECK_THROWS_WITH_AS(plan_buffers(p), doctest::Contains("freed by op 'free_twice' but not in HBM"), std::logic_error);
}

TEST_CASE("every op of the calibration scenarios has a launch; arenas are sized by a dry run") {
  for (const char* file : kCalibration) {
    CAPTURE(file);
    const Scenario s = scenario(file);
    const StepGraph g = build_step_graph(s);
    for (int64_t r = 0; r < g.plan.num_ranks(); ++r) {
      const RoutingPlan routing = build_routing_plan(g, r, 0);
      const ArenaSizes a = size_arenas(g, s.model, r, routing);
      // The CCE loss reads the head's weight [vocab, hidden]: the input arena holds at least that.
      CHECK(a.in >= static_cast<size_t>(s.model.vocab_size * s.model.hidden_size * 2));
      CHECK(a.out[kComputeQueue] > 0);
      CHECK((a.out[kCopyQueue] > 0) == s.spec.swap.enabled);
      if (g.plan.num_ranks() > 1) {
        CHECK(a.out[2 + static_cast<int>(GroupKind::fsdp)] > 0);
        CHECK(a.out[2 + static_cast<int>(GroupKind::ep)] > 0);
      }
      CHECK((pinned_bytes_needed(g.programs.front()) > 0) == s.spec.swap.enabled);
    }
  }
}

TEST_CASE("dense MLA attention has a launch with cuDNN's SDPA and with the backend's kernels") {
  const test::DenseMlaSlice slice;
  const Scenario& s = slice.scenario;
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs.front();
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  for (const bool cudnn : {false, true}) (void)size_arenas(g, s.model, 0, routing, cudnn);  // every op launches
  // The operands one flash_attention op takes, dry: 96 heads, qk 192 / v 128, one sequence of 8192.
  auto operands = [&](const Op& op, bool cudnn) {
    Arena in, out;
    OpEnv env;
    env.graph = &g;
    env.model = &s.model;
    env.routing = &routing;
    env.cudnn_attention = cudnn;
    env.in = &in;
    env.out = &out;
    launch_op(env, p, static_cast<uint32_t>(&op - p.ops.data()));
    return std::pair{in.high_water(), out.high_water()};
  };
  const size_t rows = 8192 * 96;  // (token, head) rows; every operand a multiple of 256 bytes
  int64_t seen = 0;
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::flash_attention || op.phase == Phase::recompute) continue;
    ++seen;
    const auto own = operands(op, false), cudnn = operands(op, true);
    if (op.phase == Phase::fwd) {
      // q, k (192) and v (128) in BF16; o (BF16) and lse (FP32) out, whichever kernels run.
      CHECK(own.first == rows * (2 * 192 + 128) * 2);
      CHECK(cudnn == own);
      CHECK(own.second == rows * (128 * 2 + 4));
    } else {
      // Inputs add o, d_o (BF16) and lse. Outputs: the backend's FP32 dq, dk, dv and its FP32
      // rowsum(dO * O); cuDNN's BF16 dq, dk, dv and its scratch (FP32 rowsum and dq accumulator).
      CHECK(own.first == rows * ((2 * 192 + 128) * 2 + 2 * 128 * 2 + 4));
      CHECK(cudnn.first == own.first);
      CHECK(own.second == rows * ((2 * 192 + 128) * 4 + 4));
      // (Where cuDNN cannot run this backward - not installed - the backend's kernels run.)
      const bool cudnn_bwd = sdpa_backward_supported(SdpaShape{1, 8192, 96, 96, 192, 128});
      CHECK(cudnn.second == (cudnn_bwd ? rows * ((2 * 192 + 128) * 2 + 4 + 192 * 4) : own.second));
    }
  }
  CHECK(seen >= 2);
}

// The operands one op takes in a dry run (input and output arena high-water marks, bytes).
std::pair<size_t, size_t> dry_operands(const StepGraph& g, const ModelSpec& model, const RoutingPlan& routing,
                                       const Op& op, bool cudnn) {
  const Program& p = g.programs.front();
  Arena in, out;
  OpEnv env;
  env.graph = &g;
  env.model = &model;
  env.routing = &routing;
  env.cudnn_attention = cudnn;
  env.in = &in;
  env.out = &out;
  launch_op(env, p, static_cast<uint32_t>(&op - p.ops.data()));
  return {in.high_water(), out.high_water()};
}

TEST_CASE("GQA attention has a launch with cuDNN's SDPA (8 key/value heads) and with the backend's kernels") {
  // Llama 3.1 8B: 32 query heads, 8 key/value heads of 128, one sequence of 8192 per micro-batch.
  const Scenario s = scenario(kLlama);
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs.front();
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  for (const bool cudnn : {false, true}) (void)size_arenas(g, s.model, 0, routing, cudnn);  // every op launches
  const size_t t = 8192, hq = 32, hkv = 8, d = 128;  // every operand a multiple of 256 bytes
  int64_t fwd = 0, bwd = 0;
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::flash_attention) continue;
    const auto own = dry_operands(g, s.model, routing, op, false), cudnn = dry_operands(g, s.model, routing, op, true);
    const size_t qkv = t * (hq + 2 * hkv) * d * 2;  // BF16 q [t, 32, 128], k and v [t, 8, 128]
    if (op.phase == Phase::fwd) {
      ++fwd;
      CHECK(own.first == qkv);
      CHECK(cudnn.first == qkv);
      // o (BF16) and lse (FP32); the backend's kernels also expand k and v to 32 heads (BF16).
      CHECK(cudnn.second == t * hq * (d * 2 + 4));
      CHECK(own.second == t * hq * (d * 2 + 4) + 2 * t * hq * d * 2);
    } else if (op.phase == Phase::bwd) {
      ++bwd;
      const size_t in = qkv + t * hq * (2 * d * 2 + 4);  // adds o, d_o (BF16) and lse
      CHECK(own.first == in);
      CHECK(cudnn.first == in);
      // The backend's kernels: FP32 dq [t, 32], dk, dv [t, 8]; the expanded BF16 k, v and their
      // FP32 gradients [t, 32]; the FP32 rowsum(dO * O). cuDNN: BF16 dq, dk, dv (the grouping
      // summed inside) and its scratch (FP32 rowsum and dq accumulator).
      CHECK(own.second == t * (hq + 2 * hkv) * d * 4 + 2 * t * hq * d * 2 + 2 * t * hq * d * 4 + t * hq * 4);
      const SdpaShape ss{1, 8192, 32, 8, 128, 128};
      CHECK(sdpa_backward_scratch_bytes(ss) == t * hq * 4 + t * hq * d * 4);
      CHECK(cudnn.second == (sdpa_backward_supported(ss) ? qkv + sdpa_backward_scratch_bytes(ss) : own.second));
    }
  }
  CHECK(fwd == 2 * 2);  // 2 layers x 2 micro-batches (no recompute)
  CHECK(bwd == fwd);
}

TEST_CASE("Qwen3's QK-norm normalises each head: (token, head) rows of head_dim") {
  const Scenario s = scenario(kQwen3);
  REQUIRE(s.model.gqa->qk_norm);
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs.front();
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  const size_t t = 8192, d = 128;
  int64_t seen = 0;
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::norm || op.phase != Phase::fwd) continue;
    const std::string& name = p.name_of(op);
    const bool is_q = name.ends_with(".attn.q_norm"), is_k = name.ends_with(".attn.k_norm");
    if (!is_q && !is_k) continue;
    ++seen;
    const size_t heads = is_q ? 32 : 4;
    const auto [in, out] = dry_operands(g, s.model, routing, op, true);
    CHECK(in == t * heads * d * 2 + 256);       // x, and one head_dim weight (256 bytes: aligned)
    CHECK(out == t * heads * d * 2 + t * heads * 4);  // y, and one FP32 rstd per (token, head)
  }
  CHECK(seen == 2 * 2 * 2);  // q and k, 2 layers, 2 micro-batches
}

TEST_CASE("CCE vocabulary chunks are a multiple of 8 entries wide: Qwen3's 151,936 in 19 chunks of 8,000") {
  // 151936 / 19 = 7996.6: chunks of 7,997 would give [t, 7997] BF16 logits rows that are not
  // 16-byte aligned (cuBLASLt's slow kernels, validation.md 2026-12-01).
  const Scenario s = scenario(kQwen3);
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs.front();
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  const size_t t = 8192, d = 2048, vocab = 151936, chunk = 8000;
  int64_t seen = 0;
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::cce_loss || op.phase != Phase::fwd) continue;
    ++seen;
    REQUIRE(op.num_groups == 19);
    const auto [in, out] = dry_operands(g, s.model, routing, op, true);
    CHECK(in == t * d * 2 + vocab * d * 2);  // h and the head's weight
    CHECK(out == t * chunk * 2 + t * 4);     // one chunk's BF16 logits and the FP32 loss
  }
  CHECK(seen == 2);  // one per micro-batch
}

TEST_CASE("an ungated activation is refused, naming the op: the executor's FFN kernel is SwiGLU") {
  nlohmann::json j = nlohmann::json::parse(read_input(kLlama, "scenarios", "SCENARIO").text);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "moesim-test-gelu";
  std::filesystem::create_directories(dir);
  nlohmann::json m = nlohmann::json::parse(read_input("models/calibration/llama-3.1-8b-l2.json", "models", "MODEL").text);
  m["activation"] = "gelu";
  std::ofstream(dir / "model.json") << m.dump();
  j["model"] = (dir / "model.json").string();
  j["hardware"] = std::filesystem::absolute("hardware/h200-x2.json").string();
  const Scenario s = load_scenario(InputText{(dir / "scenario.json").string(), j.dump(), false});
  const StepGraph g = build_step_graph(s);
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  CHECK_THROWS_WITH_AS(size_arenas(g, s.model, 0, routing), doctest::Contains("gated activations (SwiGLU) only"),
                       BackendError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a trainable embedding's backward has a launch: the 1-GPU slice as full fine-tuning") {
  nlohmann::json j = nlohmann::json::parse(read_input(kCalibration[0], "scenarios", "SCENARIO").text);
  j["training"].erase("lora");
  j["training"]["mode"] = "full_finetune";
  const Scenario s = load_scenario(InputText{kCalibration[0], j.dump(), false});
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs.front();
  REQUIRE(std::any_of(p.ops.begin(), p.ops.end(),
                      [](const Op& op) { return op.kind == OpKind::embedding && op.phase == Phase::bwd; }));
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  const ArenaSizes a = size_arenas(g, s.model, 0, routing);
  // The table's FP32 gradient is written by the scatter-add.
  CHECK(a.out[kComputeQueue] >= static_cast<size_t>(s.model.vocab_size * s.model.hidden_size * 4));
}

TEST_CASE("an op kind without a kernel is an error naming the op and kind") {
  const Scenario s = scenario(kCalibration[0]);
  StepGraph g = build_step_graph(s);
  Program& p = g.programs.front();
  ProgramWriter w(p);
  Op op;
  op.kind = OpKind::kda_intra_chunk;
  op.m = 8192;
  w.add(op, "layer1.attn.kda_intra_chunk");
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  CHECK_THROWS_WITH_AS(size_arenas(g, s.model, 0, routing),
                       doctest::Contains("no kernel for op 'layer1.attn.kda_intra_chunk' (kind kda_intra_chunk"),
                       BackendError);
}

TEST_CASE("implementations the executor has no kernels for are refused, naming the input") {
  nlohmann::json j = nlohmann::json::parse(read_input(kCalibration[0], "scenarios", "SCENARIO").text);
  SUBCASE("eager loss") {
    j["loss"] = {{"kind", "full"}, {"implementation", "eager"}};
  }
  SUBCASE("foreach AdamW") { j["training"]["optimizer"]["implementation"] = "foreach"; }
  const Scenario s = load_scenario(InputText{kCalibration[0], j.dump(), false});
  const StepGraph g = build_step_graph(s);
  const RoutingPlan routing = build_routing_plan(g, 0, 0);
  CHECK_THROWS_WITH_AS(size_arenas(g, s.model, 0, routing), doctest::Contains("is simulated only"), BackendError);
}

TEST_CASE("routing plan: EP2 send and receive counts match across ranks and give the engine's rows") {
  const Scenario s = scenario(kCalibration[1]);
  const StepGraph g = build_step_graph(s);
  REQUIRE(g.plan.group_size(GroupKind::ep) == 2);
  const RoutingPlan r0 = build_routing_plan(g, 0, 0), r1 = build_routing_plan(g, 1, 0);
  REQUIRE(!r0.empty());
  REQUIRE(r0.size() == r1.size());
  const int64_t assignments = g.tokens_per_micro_batch * g.routing->top_k();
  for (const auto& [key, a] : r0) {
    const RoutingSlice& b = r1.at(key);
    CHECK(a.send_rows[1] == b.recv_rows[0]);
    CHECK(a.recv_rows[1] == b.send_rows[0]);
    CHECK(a.send_rows[0] + a.send_rows[1] + b.send_rows[0] + b.send_rows[1] == 2 * assignments);
    int64_t rows0 = 0, rows1 = 0;
    for (int32_t v : a.rows_per_expert) rows0 += v;
    for (int32_t v : b.rows_per_expert) rows1 += v;
    CHECK(rows0 == a.recv_rows[0] + a.recv_rows[1]);
    CHECK(rows1 == b.recv_rows[0] + b.recv_rows[1]);
    // The engine's draw for the same (step, layer, micro, group).
    std::vector<int64_t> recv(2), kept(2);
    g.routing->sample_group_loads(0, key.first, key.second, 0, g.tokens_per_micro_batch, recv, kept);
    CHECK(rows0 == recv[0]);
    CHECK(rows1 == recv[1]);
    CHECK(a.rows_per_expert.size() == 14);
  }
}

TEST_CASE("routing plan under capacity padding: every expert C rows, fixed buffers, as the engine's") {
  const Scenario s = scenario("scenarios/calibration/qwen3-moe-slice-1gpu-pad.json");
  const StepGraph g = build_step_graph(s);
  const int64_t tokens = g.routed_tokens_per_micro_batch();
  const int64_t capacity = g.routing->expert_capacity(tokens);
  CHECK(capacity == 8192);  // 2.0 x 8192 x 8 / 16
  const RoutingPlan plan = build_routing_plan(g, 0, 0);
  REQUIRE(!plan.empty());
  for (const auto& [key, slice] : plan) {
    CHECK(slice.rows_per_expert == std::vector<int32_t>(16, static_cast<int32_t>(capacity)));
    CHECK(slice.send_rows.at(0) == 16 * capacity);
    CHECK(slice.recv_rows.at(0) == 16 * capacity);
  }
  // The graph's expert GEMMs are the padded ones, so the engine times what the executor runs.
  int gemms = 0;
  for (const Op& op : g.programs.front().ops) {
    if (op.kind != OpKind::grouped_gemm || op.routing_layer < 0) continue;
    CHECK(op.m == 16 * capacity);
    ++gemms;
  }
  CHECK(gemms > 0);
}

TEST_CASE("replaying the engine's op times under the queue rules gives the engine's step back") {
  for (const char* file : kCalibration) {
    CAPTURE(file);
    const Scenario s = scenario(file);
    const StepGraph g = build_step_graph(s);
    const CostModel cost(s.hardware);
    Engine engine(g, cost);
    EngineOptions eo;
    eo.record_timeline = true;
    eo.record_memory_ranks = 0;
    const StepResult r = engine.run(eo);
    const auto durations = op_durations(g, r.timeline);
    const auto ends = replay_schedule(g, durations);
    REQUIRE(ends.size() == r.rank_end.size());
    for (size_t k = 0; k < ends.size(); ++k) CHECK(ends[k] == r.rank_end[k]);
    // Longer ops can only make the step longer.
    auto slower = durations;
    for (auto& d : slower) {
      for (auto& x : d) x = x * 11 / 10;
    }
    const auto later = replay_schedule(g, slower);
    for (size_t k = 0; k < ends.size(); ++k) CHECK(later[k] >= ends[k]);
  }
}
