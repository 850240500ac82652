// SPDX-License-Identifier: MIT
#include "backend/cuda/calibrate_attention.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/calibrate_launch.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/op_kernels.hpp"
#include "backend/cuda/timer.hpp"
#include "core/json_input.hpp"
#include "cost/calibration.hpp"

namespace moesim::cuda {

using nlohmann::json;

std::vector<int64_t> attention_seq_grid(bool quick) {
  return quick ? std::vector<int64_t>{2048, 16384} : std::vector<int64_t>{2048, 4096, 16384, 32768};
}

std::vector<AttentionCase> attention_cases(const std::string& scenario, bool quick) {
  const InputText base = read_input(scenario, "scenarios", "--scenario");
  const json base_json = json::parse(base.text);
  const bool fused_dsa = base_json.contains("fused_ops") && base_json["fused_ops"].value("dsa", false);
  std::vector<AttentionCase> cases;
  for (int64_t seq : attention_seq_grid(quick)) {
    std::set<std::pair<OpKind, bool>> timed;  // (kind, backward) already timed at this length
    for (const bool unfuse_dsa : {false, true}) {
      if (unfuse_dsa && !fused_dsa) continue;
      json sj = base_json;
      sj["batch"]["sequence_length"] = seq;
      sj["batch"]["global_batch_size"] = 1;
      sj["batch"]["micro_batch_size"] = 1;
      sj["training"].erase("lora");
      sj["training"]["mode"] = "full_finetune";
      if (unfuse_dsa) sj["fused_ops"]["dsa"] = false;
      AttentionCase c;
      c.seq = seq;
      c.unfused_dsa = unfuse_dsa;
      c.scenario = std::make_unique<Scenario>(load_scenario(InputText{base.name, sj.dump(), base.embedded}));
      c.graph = build_step_graph(*c.scenario);
      c.program = static_cast<size_t>(c.graph.plan.program_of(0));
      const Program& p = c.graph.programs[c.program];
      for (uint32_t i = 0; i < p.ops.size(); ++i) {
        const Op& op = p.ops[i];
        if (!is_calibrated_attention_kind(op.kind) || op.phase == Phase::recompute || op.phase == Phase::optimizer) continue;
        if (timed.insert({op.kind, op.phase == Phase::bwd}).second) c.ops.push_back(i);
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

json bench_attention(const OpBenchOptions& o, const std::vector<AttentionCase>& cases, std::string& summary) {
  // Each call is milliseconds to a second: fewer repeats than the small kernels.
  const int warmup = o.quick ? 1 : 2;
  const int repeats = o.quick ? 2 : 5;
  std::map<std::pair<std::string, std::string>, std::map<double, std::vector<double>>> by_x;  // (kind, phase)
  std::map<std::pair<std::string, std::string>, json> samples;
  summary += "\nAttention (executor launches)  kind               phase      seq   ms      TF/s\n";
  for (const AttentionCase& c : cases) {
    const StepGraph& g = c.graph;
    const Scenario& sc = *c.scenario;
    const Program& p = g.programs[c.program];
    const int64_t seq = c.seq;
    // Causal DSA keys as the executor's tables.
    DeviceBuffer<int32_t> dsa_keys;
    if (sc.model.dsa_indexer) {
      const int64_t tokens = std::max<int64_t>(g.tokens_per_micro_batch, 1);
      const int64_t s_len = std::max<int64_t>(1, std::min(g.seq_len, tokens));
      const int64_t k = std::min(sc.model.dsa_indexer->top_k, s_len);
      const std::vector<int32_t> keys = causal_dsa_keys(tokens, s_len, k, 0x5eed);
      dsa_keys = DeviceBuffer<int32_t>(keys.size());
      dsa_keys.upload(keys);
    }
    for (const uint32_t i : c.ops) {
      const Op& op = p.ops[i];
      const bool backward = op.phase == Phase::bwd;
      OpEnv env;
      env.graph = &g;
      env.model = &sc.model;
      env.stream = o.stream;
      env.tables.dsa_keys = dsa_keys.data();
      const LaunchTiming lt = time_launch(env, p, i, 51, warmup, repeats);
      const Timing& t = lt.timing;
      const std::string kind(enum_name(op.kind));
      const std::string phase = backward ? "backward" : "forward";
      const auto rows = static_cast<double>(op.m);
      // The rate the cost model divides into: the op's flops, or for the gather its bytes.
      const bool bytes_rate = attention_table_counts_bytes(op.kind);
      const double work = bytes_rate ? op.bytes_read + op.bytes_written : op.flops;
      by_x[{kind, phase}][rows].push_back(work / t.median_s);
      samples[{kind, phase}].push_back({{"op", p.name_of(op)}, {"seq", seq}, {"query_rows", op.m},
                         {bytes_rate ? "bytes" : "flops", work}, {"seconds", t.median_s}, {"min_seconds", t.min_s},
                         {"max_seconds", t.max_s}, {bytes_rate ? "bytes_per_s" : "flops_per_s", work / t.median_s},
                         {"operand_bytes", static_cast<double>(lt.operand_bytes)}});
      summary += "                               " + kind + std::string(kind.size() < 19 ? 19 - kind.size() : 1, ' ') +
                    phase + std::string(11 - phase.size(), ' ') +
                    fmt("%5.0f  %7.2f  %6.1f", static_cast<double>(seq), t.median_s * 1e3, work / t.median_s / 1e12) +
                    (bytes_rate ? " TB/s\n" : "\n");
      if (o.log) {
        o.log(fmt("attention seq %.0f: ", static_cast<double>(seq)) + kind + " " + phase +
              fmt(" %.2f ms, %.1f ", t.median_s * 1e3, work / t.median_s / 1e12) + (bytes_rate ? "TB/s" : "TFLOP/s"));
      }
      if (o.measured) o.measured();
    }
    MOESIM_CUDA_CHECK(cudaStreamSynchronize(o.stream));
  }
  json out = json::object();
  for (const auto& [key, xs] : by_x) {
    json tb = calibration_table("query_rows", attention_table_counts_bytes(*enum_from_name<OpKind>(key.first)) ? "bytes_per_s" : "flops_per_s", xs);
    tb["dtype"] = "bf16";
    tb["samples"] = samples[key];
    out[key.first][key.second] = tb;
  }
  return out;
}

}  // namespace moesim::cuda
