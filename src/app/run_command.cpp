// SPDX-License-Identifier: MIT
#include "app/run_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/executor.hpp"
#include "app/hardware_flag.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"
#include "engine/engine.hpp"
#include "engine/power_runs.hpp"
#include "report/trace.hpp"

namespace moesim {
namespace {

constexpr double kTarget = 0.05;  // validation target: step time and peak memory within 5%

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Op names folded over layers ("layer12.attn.kda" -> "layer*.attn.kda"), as the engine's top_ops.
std::string folded(const std::string& name) {
  const size_t dot = name.find('.');
  return name.starts_with("layer") && dot != std::string::npos ? "layer*" + name.substr(dot) : name;
}

// Busy time per folded op name of one rank in a timeline. With `from_last_arrival`, a collective
// counts from the moment the last member of its group reached it (the engine's start), not from
// this rank's arrival: measured records start at the arrival, so they include waiting for peers.
// Members' clocks are their own step-start events, aligned by a host barrier (microseconds).
std::map<std::string, double> per_op_seconds(const StepGraph& g, const Timeline& t, int32_t rank, bool from_last_arrival) {
  std::map<std::pair<int32_t, uint32_t>, Picoseconds> start_of;
  if (from_last_arrival) {
    for (const ExecRecord& r : t.records) start_of[{r.rank, r.op}] = r.start;
  }
  std::map<std::string, double> out;
  for (const ExecRecord& r : t.records) {
    if (r.rank != rank) continue;
    const Program& p = g.programs[static_cast<size_t>(r.program)];
    const Op& op = p.ops[r.op];
    Picoseconds start = r.start;
    if (from_last_arrival && is_collective(op.kind) && g.plan.group_size(op.group) > 1) {
      for (int64_t m : g.plan.members(rank, op.group)) {
        auto it = start_of.find({static_cast<int32_t>(m), r.op});
        if (it != start_of.end()) start = std::max(start, it->second);
      }
      start = std::min(start, r.end);
    }
    out[folded(p.name_of(op))] += static_cast<double>(r.end - start) * 1e-12;
  }
  return out;
}

struct Loaded {
  Scenario scenario;
  StepGraph graph;
};

Loaded load(const RunCommand& c) {
  Loaded l{load_scenario_with_hardware_flag(read_input(c.scenario, "scenarios", "SCENARIO"), c.hardware), {}};
  l.graph = build_step_graph(l.scenario);
  return l;
}

// Process 0 gets the result of every rank; the others an empty one.
cuda::ExecResult execute(const RunCommand& c, const Loaded& l, Distributed& job) {
  if (c.steps < 1) throw InputError("--steps", "", "must be at least 1");
  cuda::ExecOptions o;
  o.measured_steps = static_cast<int>(c.steps);
  cuda::ExecResult r = cuda::execute(l.scenario, l.graph, o, job);
  if (job.rank() == 0 && !c.trace.empty()) {
    write_file_atomically(c.trace, chrome_trace_json(l.graph, r.timeline, TraceOptions{}), "--trace");
  }
  return r;
}

nlohmann::json rank_json(const cuda::RankRun& k) {
  return {{"rank", k.rank},
          {"device", k.device_name},
          {"device_index", k.device},
          {"end_s", static_cast<double>(k.end) * 1e-12},
          {"device_bytes", k.device_bytes},
          {"persistent_bytes", k.persistent_bytes},
          {"slab_bytes", k.slab_bytes},
          {"slab_waits", k.slab_waits},
          {"program_order_peak_bytes", k.program_order_peak_bytes},
          {"timeline_peak_bytes", k.timeline_peak_bytes},
          {"context_bytes", k.context_bytes},
          {"executor_bytes", k.executor_bytes}};
}

double error_of(double predicted, double measured) { return measured > 0 ? (predicted - measured) / measured : 0; }
std::string pct(double e) { return fmt("%+.1f%%", 100 * e); }
const char* verdict(double e) { return std::fabs(e) <= kTarget ? "pass" : "FAIL"; }

}  // namespace

std::string run_run_command(const RunCommand& c, Distributed& job) {
  const Loaded l = load(c);
  const cuda::ExecResult r = execute(c, l, job);
  if (job.rank() != 0) return {};
  const auto ops = per_op_seconds(l.graph, r.timeline, r.slowest_rank, false);
  std::vector<std::pair<std::string, double>> top(ops.begin(), ops.end());
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (top.size() > 15) top.resize(15);
  if (c.json) {
    nlohmann::json j;
    j["scenario"] = l.scenario.spec.name;
    j["num_ranks"] = r.ranks.size();
    j["processes"] = job.size();
    j["step_time_s"] = static_cast<double>(r.step_time) * 1e-12;
    std::vector<double> steps;
    for (Picoseconds s : r.step_times) steps.push_back(static_cast<double>(s) * 1e-12);
    j["measured_step_times_s"] = steps;
    j["slowest_rank"] = r.slowest_rank;
    j["attention_kernels"] = r.attention_kernels;
    for (const cuda::RankRun& k : r.ranks) j["ranks"].push_back(rank_json(k));
    for (const auto& [name, s] : top) j["top_ops"].push_back({{"name", name}, {"seconds", s}});
    return j.dump(2) + "\n";
  }
  std::string out = l.scenario.spec.name + ": executed on " + std::to_string(r.ranks.size()) + " GPU(s) (" +
                    (r.ranks.empty() ? "" : r.ranks.front().device_name) + ")\n";
  out += "  step time         " + fmt("%.4f s", static_cast<double>(r.step_time) * 1e-12) + " (median of " +
         std::to_string(r.step_times.size()) + " measured steps after " + std::to_string(cuda::ExecOptions{}.warmup_steps) + " warm-up; slowest rank " +
         std::to_string(r.slowest_rank) + ")\n";
  out += "  flash attention   " + r.attention_kernels + "\n";
  for (const cuda::RankRun& k : r.ranks) {
    out += "  rank " + std::to_string(k.rank) + " memory     device " + fmt("%.3f GB", k.device_bytes / 1e9) +
           " = context, NCCL and libraries " + fmt("%.3f GB", (k.device_bytes - k.persistent_bytes - k.slab_bytes) / 1e9) +
           " + persistent " + fmt("%.3f GB", k.persistent_bytes / 1e9) + " + transient slab " +
           fmt("%.3f GB", k.slab_bytes / 1e9) + " (" + std::to_string(k.slab_waits) + " waits added)\n" +
           "                    tensors at their peak: " + fmt("%.3f GB", k.timeline_peak_bytes / 1e9) +
           " in GPU time, " + fmt("%.3f GB", k.program_order_peak_bytes / 1e9) + " in program order; executor arenas " +
           fmt("%.3f GB", k.executor_bytes / 1e9) + " (not counted)\n";
  }
  out += "  busiest ops (slowest rank, all layers together):\n";
  for (const auto& [name, s] : top) out += "    " + name + std::string(name.size() < 56 ? 56 - name.size() : 1, ' ') + fmt("%.4f s\n", s);
  return out;
}

std::string run_validate_command(const RunCommand& c, Distributed& job) {
  const Loaded l = load(c);
  const cuda::ExecResult measured = execute(c, l, job);
  if (job.rank() != 0) return {};
  EngineOptions eo;
  eo.step = 0;  // the executor's routing sample
  eo.record_timeline = true;
  eo.record_memory_ranks = l.graph.plan.num_ranks();
  eo.rank_speed = rank_speeds(l.scenario.spec);
  const CostModel cost(l.scenario.hardware);
  const PoweredSteps powered = simulate_step_in_power_state(l.graph, cost, eo);
  const StepResult& predicted = powered.results.front();

  const double meas_step = static_cast<double>(measured.step_time) * 1e-12;
  const double pred_step = static_cast<double>(predicted.step_time) * 1e-12;
  const double step_err = error_of(pred_step, meas_step);
  // The measured op times under the execution contract's queue rules: how much of the measured
  // step the op times explain (the rest is what the rules leave out: launch gaps, host issue).
  double replay_step = 0;
  if (l.graph.programs.size() == 1) {
    for (Picoseconds e : cuda::replay_schedule(l.graph, cuda::op_durations(l.graph, measured.timeline))) {
      replay_step = std::max(replay_step, static_cast<double>(e) * 1e-12);
    }
  }
  const double replay_err = error_of(replay_step, meas_step);
  // Peak memory (each the max over ranks), from the whole to its parts:
  //   device total (the target): what the rank's GPU holds at the end of a step (cudaMemGetInfo,
  //            less the executor's own operand arenas): CUDA context, NCCL, libraries, persistent
  //            state and the transient tensors' slab. Predicted: the engine's peak_hbm_bytes.
  //   transient slab: the slab the executor placed on its measured op times, against the one the
  //            engine's ledger placed on simulated times (the same best-fit allocator).
  //   tensors (GPU time): persistent state + the transient tensors live at once, between their
  //            ops' measured starts and ends, against the engine's live peak (no reserve, no
  //            `runtime`): the engine's accounting checked on measured times.
  struct MemoryCheck {
    const char* key;
    const char* label;
    double measured = 0, predicted = 0;
  };
  std::vector<MemoryCheck> mem{{"peak_memory_total", "device total      "},
                               {"peak_memory_slab", "transient slab    "},
                               {"peak_memory_tensors_gpu_time", "tensors (GPU time)"}};
  for (size_t r = 0; r < measured.ranks.size(); ++r) {
    const cuda::RankRun& k = measured.ranks[r];
    const RankMemory& m = predicted.memory[r];
    const double runtime = l.graph.programs[static_cast<size_t>(l.graph.plan.program_of(static_cast<int64_t>(r)))].persistent.runtime;
    const double tensors = m.peak_hbm_bytes - m.allocator_reserve_bytes - runtime;
    const double meas[] = {k.device_bytes, k.slab_bytes, k.timeline_peak_bytes};
    const double pred[] = {m.peak_hbm_bytes, m.slab_bytes, tensors};
    for (size_t i = 0; i < mem.size(); ++i) {
      mem[i].measured = std::max(mem[i].measured, meas[i]);
      mem[i].predicted = std::max(mem[i].predicted, pred[i]);
    }
  }

  const int32_t rank = measured.slowest_rank;
  const auto meas_ops = per_op_seconds(l.graph, measured.timeline, rank, true);
  const auto pred_ops = per_op_seconds(l.graph, predicted.timeline, rank, false);
  std::vector<std::string> names;
  for (const auto& [n, s] : meas_ops) names.push_back(n);
  std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return meas_ops.at(a) != meas_ops.at(b) ? meas_ops.at(a) > meas_ops.at(b) : a < b;
  });
  auto pred_of = [&](const std::string& n) {
    auto it = pred_ops.find(n);
    return it == pred_ops.end() ? 0.0 : it->second;
  };

  if (c.json) {
    nlohmann::json j;
    j["scenario"] = l.scenario.spec.name;
    j["hardware"] = l.scenario.hardware_file;
    j["calibrated"] = cost.calibration() != nullptr;
    j["num_ranks"] = measured.ranks.size();
    j["processes"] = job.size();
    j["target"] = kTarget;
    j["step_time"] = {{"measured_s", meas_step}, {"predicted_s", pred_step}, {"error", step_err},
                      {"pass", std::fabs(step_err) <= kTarget}};
    if (l.scenario.hardware.device.power) j["power_state"] = powered.state;
    j["step_time_from_measured_ops"] = {{"replayed_s", replay_step}, {"error", replay_err}};
    for (const MemoryCheck& m : mem) {
      const double e = error_of(m.predicted, m.measured);
      j[m.key] = {{"measured_bytes", m.measured}, {"predicted_bytes", m.predicted}, {"error", e},
                  {"pass", std::fabs(e) <= kTarget}};
    }
    j["step_times_s"] = nlohmann::json::array();
    for (Picoseconds t : measured.step_times) j["step_times_s"].push_back(static_cast<double>(t) * 1e-12);
    for (const cuda::RankRun& k : measured.ranks) j["ranks"].push_back(rank_json(k));
    j["ops_rank"] = rank;
    for (const std::string& n : names) {
      const double m = meas_ops.at(n), p = pred_of(n);
      j["ops"].push_back({{"name", n}, {"measured_s", m}, {"predicted_s", p}, {"error", error_of(p, m)}});
    }
    return j.dump(2) + "\n";
  }
  std::string out = l.scenario.spec.name + ": GPUs vs simulator (" + l.scenario.hardware_file +
                    (cost.calibration() ? ", calibrated" : ", no calibration file") + "), " +
                    std::to_string(measured.ranks.size()) + " rank(s)\n";
  out += "  step time      measured " + fmt("%.4f s", meas_step) + ", predicted " + fmt("%.4f s", pred_step) + ", error " +
         pct(step_err) + "  [" + verdict(step_err) + ", target 5%]\n";
  if (l.scenario.hardware.device.power) out += "  power state    " + describe(powered.state) + "\n";
  if (replay_step > 0) {
    out += "                 the measured op times under the queue rules (no cost model): " + fmt("%.4f s", replay_step) +
           ", " + pct(replay_err) + " of the measured step\n";
  }
  for (size_t i = 0; i < mem.size(); ++i) {
    const double e = error_of(mem[i].predicted, mem[i].measured);
    out += std::string(i == 0 ? "  peak memory    " : "                 ") + mem[i].label + "  measured " +
           fmt("%7.3f GB", mem[i].measured / 1e9) + ", predicted " + fmt("%7.3f GB", mem[i].predicted / 1e9) + ", error " +
           pct(e) + "  [" + verdict(e) + "]\n";
  }
  out += "  per op (rank " + std::to_string(rank) + ", all layers and micro-batches together; collectives from the last member's\n"
         "  arrival; error = predicted/measured - 1):\n";
  out += "    op" + std::string(54, ' ') + "measured    predicted   error\n";
  double sum_m = 0, sum_p = 0;
  for (const std::string& n : names) {
    const double m = meas_ops.at(n), p = pred_of(n);
    sum_m += m;
    sum_p += p;
    out += "    " + n + std::string(n.size() < 56 ? 56 - n.size() : 1, ' ') + fmt("%9.3f ms", m * 1e3) +
           fmt("  %9.3f ms", p * 1e3) + "  " + pct(error_of(p, m)) + "\n";
  }
  out += "    (sum of op times, overlapping streams counted each)" + std::string(4, ' ') + fmt("%9.3f ms", sum_m * 1e3) +
         fmt("  %9.3f ms", sum_p * 1e3) + "  " + pct(error_of(sum_p, sum_m)) + "\n";
  return out;
}

}  // namespace moesim
