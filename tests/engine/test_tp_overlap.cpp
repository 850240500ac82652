// SPDX-License-Identifier: MIT
// TP communication overlap (parallel.tp.comm_overlap): each attention and dense-FFN projection next
// to a sequence-parallel collective is split into ring-step pieces that do exactly the unsplit
// projection's work, every op runs, the collective runs beside the pieces that do not wait for it,
// and the pieces start when the ring lets them: the first last chunk at the later of the gather's
// end and the region's last main (the g + max((tp - 1) g, c) of graph/tape_builder.hpp).
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

struct Run {
  StepGraph graph;
  StepResult result;
};

Run simulate(const Plan& plan) {
  const Scenario s = test::scenario(plan);
  Run run{build_step_graph(s), {}};
  EngineOptions opt;
  opt.record_timeline = true;
  run.result = Engine(run.graph, CostModel(s.hardware)).run(opt);
  return run;
}

// Llama 3.1 8B over TP8 x FSDP2 2 on H200s, 8,192-token sequences: ring steps of 1,024 rows, at
// which NVLink's collectives take longer than the 8B's projections, so hiding them pays.
Plan llama_tp8(const std::string& overlap) {
  Plan p = test::dense_tp8();
  p.model = "llama-3.1-8b";
  p.seq = 8192;
  p.tp_comm_overlap = overlap;
  return p;
}

// Forward ops of (layer, micro-batch 0) on program 0 by name.
std::map<std::string, const Op*> forward_ops(const Program& p, int32_t layer) {
  std::map<std::string, const Op*> ops;
  for (const Op& op : p.ops) {
    if (op.phase == Phase::fwd && op.layer == layer && op.micro == 0) ops[std::string(p.name_of(op))] = &op;
  }
  return ops;
}

double total_flops(const Program& p, OpKind kind) {
  double f = 0;
  for (const Op& op : p.ops) f += op.kind == kind ? op.flops : 0;
  return f;
}

double tp_comm_bytes(const Program& p, int64_t* count) {
  double b = 0;
  for (const Op& op : p.ops) {
    if (op.group == GroupKind::tp && is_communication(op.kind)) {
      b += op.comm_bytes;
      ++*count;
    }
  }
  return b;
}

const ExecRecord& record_of(const Run& run, int32_t rank, uint32_t op) {
  for (const ExecRecord& r : run.result.timeline.records) {
    if (r.rank == rank && r.op == op) return r;
  }
  FAIL("no record of op " << op);
  throw std::logic_error("unreachable");
}

uint32_t index_of(const Program& p, const Op* op) { return static_cast<uint32_t>(op - p.ops.data()); }

}  // namespace

TEST_CASE("TP overlap splits the projections next to TP collectives into pieces that do their work") {
  std::string form;
  SUBCASE("chunked") { form = "chunked"; }
  SUBCASE("fused") { form = "fused"; }
  const bool chunked = form == "chunked";
  CAPTURE(form);
  const Run off = simulate(llama_tp8("none"));
  const Run on = simulate(llama_tp8(form));
  CHECK(check_step_graph(on.graph).empty());
  const Program& p0 = off.graph.programs[0];
  const Program& p1 = on.graph.programs[0];
  // The same work: GEMM FLOPs, and the same TP collectives with the same bytes.
  CHECK(total_flops(p1, OpKind::gemm) == doctest::Approx(total_flops(p0, OpKind::gemm)).epsilon(1e-12));
  int64_t n0 = 0, n1 = 0;
  CHECK(tp_comm_bytes(p1, &n1) == doctest::Approx(tp_comm_bytes(p0, &n0)).epsilon(1e-12));
  CHECK(n1 == n0);
  // Each projection of a gathered input: a main of 7 ring steps and a last chunk of one; each
  // reduce-scattered one: its first step under its own name, and the rest (7). A step is 1/8 of
  // the rows. Chunked, a step is one GEMM kernel of its rows each way; fused, each piece is part of
  // one kernel over all the rows.
  const auto before = forward_ops(p0, 1);
  const auto after = forward_ops(p1, 1);
  const int64_t tp = 8;
  int64_t gathered = 0, scattered = 0;
  for (const auto& [name, op] : after) {
    const bool last = name.ends_with(".last_chunk"), rest = name.ends_with(".rest");
    if (!last && !rest) continue;
    const std::string base = name.substr(0, name.rfind('.'));
    CAPTURE(name);
    REQUIRE(before.contains(base));
    REQUIRE(after.contains(base));
    const int64_t rows = before.at(base)->m;
    const Op* other = after.at(base);
    CHECK(op->m == (chunked ? rows / tp : rows));
    CHECK(other->m == (chunked ? rows / tp : rows));
    CHECK(op->num_kernels == (chunked && !last ? tp - 1 : 1));
    CHECK(other->num_kernels == (chunked && last ? tp - 1 : 1));
    CHECK(op->flops == doctest::Approx(before.at(base)->flops * (last ? 1.0 : tp - 1.0) / tp).epsilon(1e-12));
    CHECK(op->flops + other->flops == doctest::Approx(before.at(base)->flops).epsilon(1e-12));
    (last ? gathered : scattered) += 1;
  }
  // Llama: q, k, v and the gated up-projection read gathered inputs; the output and down
  // projections are reduce-scattered.
  CHECK(gathered == 4);
  CHECK(scattered == 2);
  // The LM head's projection is not overlapped (the stacks overlap only the transformer blocks).
  for (const Op& op : p1.ops) CHECK(std::string(p1.name_of(op)).find("head.last_chunk") == std::string::npos);
}

TEST_CASE("TP overlap: every op runs, the collectives run beside the pieces, and the step is shorter") {
  std::string form;
  SUBCASE("chunked") { form = "chunked"; }
  SUBCASE("fused") { form = "fused"; }
  CAPTURE(form);
  const Run off = simulate(llama_tp8("none"));
  const Run on = simulate(llama_tp8(form));
  for (const Run* run : {&off, &on}) {
    std::map<int32_t, size_t> ran;
    for (const ExecRecord& e : run->result.timeline.records) ++ran[e.rank];
    for (int64_t r = 0; r < run->graph.plan.num_ranks(); ++r) {
      const Program& p = run->graph.programs[static_cast<size_t>(run->graph.plan.program_of(r))];
      CHECK(ran[static_cast<int32_t>(r)] == p.ops.size());
    }
  }
  const Program& p = on.graph.programs[0];
  const auto ops = forward_ops(p, 2);
  auto rec = [&](const std::string& name) {
    CAPTURE(name);
    REQUIRE(ops.contains("layer2." + name));
    return record_of(on, 0, index_of(p, ops.at("layer2." + name)));
  };
  // Gather side: the query projection's main runs while the gather is in flight; its last chunk
  // starts only after it.
  const ExecRecord ag = rec("attn.tp_all_gather"), main = rec("attn.q_proj"), last = rec("attn.q_proj.last_chunk");
  CHECK(main.start < ag.end);
  CHECK(ag.start < main.end);
  CHECK(last.start >= ag.end);
  // The mains of q, k and v run back to back; the last chunks follow the later of them and the gather.
  const ExecRecord main_v = rec("attn.v_proj");
  CHECK(main_v.start >= main.end);
  CHECK(last.start == std::max(ag.end, main_v.end));
  // Scatter side: the reduce-scatter starts after the first rows and runs beside the rest; the
  // residual add waits for both.
  const ExecRecord head = rec("attn.o_proj"), rs = rec("attn.tp_reduce_scatter"), rest = rec("attn.o_proj.rest"),
                   add = rec("attn_residual_add");
  CHECK(rs.start >= head.end);
  CHECK(rs.start < rest.end);
  CHECK(rest.start < rs.end);
  CHECK(add.start >= std::max(rs.end, rest.end));
  CHECK(on.result.step_time < off.result.step_time);
  // A fused kernel runs at the whole projection's efficiency, chunks at a step's rows: fused is faster.
  if (form == "chunked") CHECK(simulate(llama_tp8("fused")).result.step_time < on.result.step_time);
}

TEST_CASE("TP overlap needs sequence parallelism") {
  Plan p = llama_tp8("chunked");
  p.sp = false;
  CHECK_THROWS_WITH_AS(test::scenario(p), doctest::Contains("/parallel/tp/comm_overlap"), InputError);
  p.tp = 1;  // nothing to overlap: allowed
  p.shard = 16;
  p.global_batch = 16;
  CHECK_NOTHROW(test::scenario(p));
}

TEST_CASE("TP overlap on every attention kind: MLA, DSA, KDA and GQA with MoE blocks keep their work and run") {
  for (const std::string model : {"kimi-linear-48b-a3b", "deepseek-v3.2", "qwen3-30b-a3b"}) {
    CAPTURE(model);
    Plan p = llama_tp8("none");
    p.model = model;
    p.tp = 4;
    p.shard = 4;
    p.ep = 4;
    p.devices = 16;
    p.seq = 4096;
    p.recompute = "selective";
    const Run off = simulate(p);
    p.tp_comm_overlap = "chunked";
    const Run on = simulate(p);
    CHECK(check_step_graph(on.graph).empty());
    const Program& p0 = off.graph.programs[0];
    const Program& p1 = on.graph.programs[0];
    CHECK(total_flops(p1, OpKind::gemm) == doctest::Approx(total_flops(p0, OpKind::gemm)).epsilon(1e-12));
    CHECK(total_flops(p1, OpKind::grouped_gemm) == doctest::Approx(total_flops(p0, OpKind::grouped_gemm)).epsilon(1e-12));
    int64_t pieces = 0;
    for (const Op& op : p1.ops) {
      const std::string name(p1.name_of(op));
      pieces += name.ends_with(".last_chunk") || name.ends_with(".rest") ? 1 : 0;
      const bool moe_piece = name.find("moe.") != std::string::npos && name.ends_with(".rest");
      CHECK_FALSE(moe_piece);  // the MoE block is not overlapped
    }
    CHECK(pieces > 0);
    size_t ran = 0;
    for (const ExecRecord& e : on.result.timeline.records) ran += e.rank == 0 ? 1 : 0;
    CHECK(ran == p1.ops.size());
  }
}
