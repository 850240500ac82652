// SPDX-License-Identifier: MIT
#include "backend/cuda/calibrate_cce.hpp"

#include <algorithm>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/calibrate_launch.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/op_kernels.hpp"
#include "backend/cuda/timer.hpp"
#include "core/json_input.hpp"
#include "cost/calibration.hpp"

namespace moesim::cuda {

using nlohmann::json;

std::vector<int64_t> cce_hidden_sizes(bool quick) {
  // Geometric-ish, bracketing the validation models' 2048, 4096 and 7168 without containing them.
  return quick ? std::vector<int64_t>{1536, 6144} : std::vector<int64_t>{1024, 1536, 2560, 3584, 5120, 6144, 8192};
}

std::vector<CceShape> cce_shapes(bool quick) {
  std::vector<CceShape> shapes;
  for (int64_t h : cce_hidden_sizes(quick)) {
    shapes.push_back({h, 8192, true, true});
    shapes.push_back({h, 8192, false, true});
  }
  if (quick) return shapes;
  for (int64_t h : {int64_t{2560}, int64_t{6144}}) {
    for (int64_t rows : {int64_t{4096}, int64_t{16384}}) shapes.push_back({h, rows, true, false});
  }
  return shapes;
}

std::vector<CceCase> cce_cases(const std::vector<CceShape>& shapes) {
  const InputText base = read_input(kCceScenario, "scenarios", "the CCE calibration scenario");
  std::vector<CceCase> cases;
  for (const CceShape& shape : shapes) {
    json sj = json::parse(base.text);
    // One micro-batch of one sequence of `rows` tokens: the loss's shapes depend on nothing else.
    sj["batch"]["global_batch_size"] = 1;
    sj["batch"]["micro_batch_size"] = 1;
    sj["batch"]["sequence_length"] = shape.rows;
    if (shape.head_trains) {
      sj["training"]["mode"] = "full_finetune";
      sj["training"].erase("lora");
    } else {
      // An adapter on the attention's q_proj only: the head is frozen, its bwd op has no dW.
      sj["training"]["mode"] = "lora";
      sj["training"]["lora"] = {{"rank", 16}, {"alpha", 32}, {"targets", json::array({"q_proj"})}};
    }
    CceCase c;
    c.shape = shape;
    c.scenario = std::make_unique<Scenario>(load_scenario(InputText{base.name, sj.dump(), base.embedded}));
    // The loss ops read the hidden size, the vocabulary and the tokens (graph/loss_ops.cpp); the
    // other layers' shapes follow the new hidden size too, but are never launched here.
    c.scenario->model.hidden_size = shape.hidden_size;
    c.graph = build_step_graph(*c.scenario);
    c.program = static_cast<size_t>(c.graph.plan.program_of(0));
    const Program& p = c.graph.programs[c.program];
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      const Op& op = p.ops[i];
      if (op.kind != OpKind::cce_loss) continue;
      if (!shape.head_trains && op.phase != Phase::bwd) continue;  // the same launches as the full fine-tuning's
      c.ops.push_back(i);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

json bench_cce(const OpBenchOptions& o, const std::vector<CceCase>& cases, std::string& summary) {
  // Each launch is milliseconds to a tenth of a second: the attention tables' repeats.
  const int warmup = o.quick ? 1 : 2;
  const int repeats = o.quick ? 2 : 5;
  Gemm gemm;
  std::map<CcePass, std::map<double, std::vector<double>>> by_x;
  std::map<CcePass, json> samples;
  summary += "\nCCE loss (executor launches)  op                   pass              hidden   rows  vocab/chunks    ms     TF/s\n";
  for (const CceCase& c : cases) {
    const Program& p = c.graph.programs[c.program];
    // Targets inside one vocabulary chunk, as the executor's index table (executor.cpp).
    const int64_t tokens = std::max<int64_t>(c.graph.tokens_per_micro_batch, 1);
    std::mt19937_64 rng(0x5eed);
    std::vector<int32_t> targets(static_cast<size_t>(tokens));
    for (auto& v : targets) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(kChunkTargetRange));
    DeviceBuffer<int32_t> chunk_targets(targets.size());
    chunk_targets.upload(targets);
    for (uint32_t i : c.ops) {
      const Op& op = p.ops[i];
      OpEnv env;
      env.graph = &c.graph;
      env.model = &c.scenario->model;
      env.stream = o.stream;
      env.gemm = &gemm;
      env.tables.chunk_targets = chunk_targets.data();
      const LaunchTiming lt = time_launch(env, p, i, 61, warmup, repeats);
      const Timing& t = lt.timing;
      const CcePass pass = cce_pass_of(op);
      const std::string pass_name(enum_name(pass));
      const double rate = op.flops / t.median_s;
      if (c.shape.in_table) by_x[pass][static_cast<double>(op.k)].push_back(rate);
      samples[pass].push_back({{"op", p.name_of(op)}, {"hidden_size", op.k}, {"rows", op.m}, {"vocab", op.n},
                               {"chunks", op.num_groups}, {"head_trains", op.trainable_weight}, {"flops", op.flops},
                               {"seconds", t.median_s}, {"min_seconds", t.min_s}, {"max_seconds", t.max_s},
                               {"flops_per_s", rate}, {"in_table", c.shape.in_table},
                               {"operand_bytes", static_cast<double>(lt.operand_bytes)}});
      const std::string name = p.name_of(op);
      summary += "                               " + name + std::string(name.size() < 21 ? 21 - name.size() : 1, ' ') +
                 pass_name + std::string(pass_name.size() < 16 ? 16 - pass_name.size() : 1, ' ') +
                 fmt("%6.0f  %5.0f  %6.0f/%-3.0f", static_cast<double>(op.k), static_cast<double>(op.m),
                     static_cast<double>(op.n), static_cast<double>(op.num_groups)) +
                 fmt("  %7.2f  %6.1f\n", t.median_s * 1e3, rate / 1e12);
      if (o.log) {
        o.log(fmt("cce hidden %.0f: ", static_cast<double>(op.k)) + name + " (" + pass_name + ")" +
              fmt(" %.2f ms, %.1f TFLOP/s", t.median_s * 1e3, rate / 1e12));
      }
      if (o.measured) o.measured();
    }
    MOESIM_CUDA_CHECK(cudaStreamSynchronize(o.stream));
  }
  json out = json::object();
  for (const auto& [pass, xs] : by_x) {
    // Several ops at one hidden size (forward: the fwd and recompute ops) give the median of their rates.
    json tb = calibration_table("hidden_size", "flops_per_s", xs);
    tb["dtype"] = "bf16";
    tb["samples"] = samples[pass];
    out[std::string(enum_name(pass))] = tb;
  }
  return out;
}

}  // namespace moesim::cuda
