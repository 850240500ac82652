// SPDX-License-Identifier: MIT
// Parallel transformer block (models' parallel_block): one norm and one TP region a layer, the
// attention and the FFN reading the same gathered input, the same GEMM FLOPs as the serial block,
// the FFN's down-projection adding the attention's output in its epilogue, every op run; and the
// model checks that refuse what it cannot express.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "../graph/graph_test_util.hpp"
#include "core/error.hpp"
#include "engine/engine.hpp"
#include "graph/graph_checks.hpp"
#include "model/accounting.hpp"

using namespace moesim;

namespace {

// GPT-3 175B cut to 2 layers, serial or parallel, written where a scenario can name it.
std::string gpt_model(bool parallel) {
  std::ifstream in("models/gpt3-175b.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["num_layers"] = 2;
  j["parallel_block"] = parallel;
  const auto path = std::filesystem::temp_directory_path() /
                    ("moesim-test-gpt-2l-" + std::string(parallel ? "parallel" : "serial") + ".json");
  std::ofstream(path) << j.dump();
  return path.string();
}

struct Counts {
  int64_t all_gathers = 0, reduce_scatters = 0, norms = 0, residual_adds = 0;
  double gemm_flops = 0;
};

Counts forward_counts(const Program& p, int32_t layer) {
  Counts c;
  for (const Op& op : p.ops) {
    if (op.phase != Phase::fwd || op.micro != 0) continue;
    if (op.kind == OpKind::gemm) c.gemm_flops += op.flops;  // every layer, the head too
    if (op.layer != layer) continue;
    if (op.group == GroupKind::tp) {
      c.all_gathers += op.kind == OpKind::all_gather ? 1 : 0;
      c.reduce_scatters += op.kind == OpKind::reduce_scatter ? 1 : 0;
    }
    c.norms += op.kind == OpKind::norm ? 1 : 0;
    c.residual_adds += std::string(p.name_of(op)).ends_with("residual_add") ? 1 : 0;
  }
  return c;
}

test::Plan tp8(const std::string& model) {
  test::Plan p = test::dense_tp8();
  p.model = model;
  p.hardware = "a100-80g-hgx";
  return p;
}

}  // namespace

TEST_CASE("parallel block: one norm, one TP region and one residual add a layer, the serial block's GEMM work") {
  const Scenario serial = test::scenario(tp8(gpt_model(false)));
  const Scenario parallel = test::scenario(tp8(gpt_model(true)));
  const StepGraph gs = build_step_graph(serial);
  const StepGraph gp = build_step_graph(parallel);
  CHECK(check_step_graph(gp).empty());
  const Counts s = forward_counts(gs.programs[0], 1);
  const Counts p = forward_counts(gp.programs[0], 1);
  CHECK(s.all_gathers == 2);
  CHECK(s.reduce_scatters == 2);
  CHECK(s.norms == 2);
  CHECK(s.residual_adds == 2);
  CHECK(p.all_gathers == 1);
  CHECK(p.reduce_scatters == 1);
  CHECK(p.norms == 1);
  CHECK(p.residual_adds == 1);
  CHECK(p.gemm_flops == doctest::Approx(s.gemm_flops).epsilon(1e-12));
  // The down-projection reads the attention's output (T x d, activation format) besides its own input.
  std::map<std::string, const Op*> ops;
  for (const auto* g : {&gs, &gp}) {
    for (const Op& op : g->programs[0].ops) {
      if (op.phase == Phase::fwd && op.layer == 1 && op.micro == 0) {
        ops[(g == &gs ? "s." : "p.") + std::string(g->programs[0].name_of(op))] = &op;
      }
    }
  }
  REQUIRE(ops.contains("s.layer1.ffn.down_proj"));
  REQUIRE(ops.contains("p.layer1.ffn.down_proj"));
  const double attention_out = 2048.0 * 12288 * 2;  // the micro-batch's tokens x d in BF16
  CHECK(ops["p.layer1.ffn.down_proj"]->bytes_read ==
        doctest::Approx(ops["s.layer1.ffn.down_proj"]->bytes_read + attention_out).epsilon(1e-12));
  // Every op runs, and the step is shorter (half the TP collectives, one norm fewer).
  const CostModel cost(parallel.hardware);
  EngineOptions opt;
  opt.record_timeline = true;
  const StepResult rp = Engine(gp, cost).run(opt);
  const StepResult rs = Engine(gs, CostModel(serial.hardware)).run({});
  size_t ran = 0;
  for (const ExecRecord& e : rp.timeline.records) ran += e.rank == 0 ? 1 : 0;
  CHECK(ran == gp.programs[static_cast<size_t>(gp.plan.program_of(0))].ops.size());
  CHECK(rp.step_time < rs.step_time);
  // One layer norm (weight and bias) fewer per layer.
  CHECK(count_params(serial.model).total_params - count_params(parallel.model).total_params == 2 * 2 * 12288);
}

TEST_CASE("parallel block: with TP communication overlap, the down-projection's rows run beside the reduce-scatter") {
  test::Plan plan = tp8(gpt_model(true));
  plan.tp_comm_overlap = "chunked";
  const StepGraph g = build_step_graph(test::scenario(plan));
  CHECK(check_step_graph(g).empty());
  bool rest = false;
  for (const Op& op : g.programs[0].ops) rest = rest || g.programs[0].name_of(op) == "layer1.ffn.down_proj.rest";
  CHECK(rest);
}

TEST_CASE("parallel block: refused with MoE layers and with Attention Residuals") {
  std::ifstream in("models/qwen3-30b-a3b.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["parallel_block"] = true;
  CHECK_THROWS_WITH_AS(load_model(InputText{"m.json", j.dump(), false}), doctest::Contains("/parallel_block"),
                       InputError);
  std::ifstream in2("models/gpt3-175b.json");
  nlohmann::json g = nlohmann::json::parse(in2);
  g["parallel_block"] = true;
  g["attention_residuals"] = {{"block_size", 8}};
  CHECK_THROWS_WITH_AS(load_model(InputText{"m.json", g.dump(), false}), doctest::Contains("/parallel_block"),
                       InputError);
}
