// SPDX-License-Identifier: MIT
#include "app/trace_commands.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "app/hardware_flag.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"
#include "cost/calibration.hpp"
#include "engine/engine.hpp"
#include "engine/power_runs.hpp"
#include "trace/host_fit.hpp"
#include "trace/kineto_trace.hpp"
#include "trace/trace_fit.hpp"
#include "trace/trace_match.hpp"

namespace moesim {
namespace {

constexpr double kStepTarget = 0.05;    // step time and peak memory within 5%
constexpr double kFamilyTarget = 0.10;  // each op family of at least 1% of the step within 10%
constexpr double kFamilyShare = 0.01;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
double error_of(double predicted, double measured) { return measured > 0 ? (predicted - measured) / measured : 0; }
std::string pct(double e) { return fmt("%+.1f%%", 100 * e); }
std::string pad(const std::string& s, size_t w) { return s + std::string(s.size() < w ? w - s.size() : 1, ' '); }

// A trace with the scenario it is matched against.
struct Matched {
  Scenario scenario;
  StepGraph graph;
  KinetoTrace trace;
  TraceMatch match;
};

KinetoTrace read_trace_flag(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw InputError("--from-trace", "", "no such file '" + path + "'");
  return read_kineto_trace(path);
}

std::unique_ptr<Matched> load_matched(const std::string& trace, const std::string& scenario, const std::string& calibration,
                                      const std::string& hardware) {
  auto m = std::make_unique<Matched>(Matched{
      load_scenario_with_hardware_flag(read_input(scenario, "scenarios", "--scenario"), hardware), {}, read_trace_flag(trace), {}});
  if (!calibration.empty()) {
    if (!std::filesystem::is_regular_file(calibration)) {
      throw InputError("--calibration", "", "no such file '" + calibration + "'");
    }
    HardwareSpec& hw = m->scenario.hardware;
    hw.calibration = calibration;
    hw.calibration_input = read_input(calibration, "hardware/calibration", "--calibration");
    hw.calibration_json = std::make_shared<const nlohmann::json>(parse_json(*hw.calibration_input));
  }
  m->graph = build_step_graph(m->scenario);
  m->match = match_trace(m->trace, m->graph);
  return m;
}

std::string match_summary(const TraceMatch& m) {
  std::string out = "  " + m.trace_file + ": rank " + std::to_string(m.rank) + ", " + std::to_string(m.steps.size()) +
                    " step(s), GPU time per step " + fmt("%.3f ms", m.step_seconds() * 1e3) + "; " +
                    std::to_string(m.num_matched_kernels) + " of " + std::to_string(m.num_kernels) +
                    " kernels matched to ops (" + fmt("%.1f%%", m.kernel_seconds > 0 ? 100 * m.matched_seconds / m.kernel_seconds : 0) +
                    " of their time)\n";
  if (!m.unmatched.empty()) {
    out += "    not matched (per step):\n";
    size_t shown = 0;
    for (const Unmatched& u : m.unmatched) {
      if (shown++ == 12) {
        out += "      ... " + std::to_string(m.unmatched.size() - 12) + " more (--json lists them)\n";
        break;
      }
      out += "      " + pad(u.what, 58) + fmt("%8.3f ms", u.seconds * 1e3) + "  " + std::to_string(u.num_kernels) +
             " kernel(s), mostly " + u.kernel_class + "\n";
    }
  }
  std::vector<std::string> silent;
  for (const auto& [name, o] : m.ops) {
    if (o.num_kernels == 0) silent.push_back(fold_layer(name));
  }
  silent.erase(std::unique(silent.begin(), silent.end()), silent.end());
  std::sort(silent.begin(), silent.end());
  silent.erase(std::unique(silent.begin(), silent.end()), silent.end());
  if (!silent.empty()) {
    out += "    ops of the scenario without kernels in the trace (in one layer at least): ";
    for (size_t i = 0; i < silent.size(); ++i) out += (i ? ", " : "") + silent[i];
    out += "\n";
  }
  for (const std::string& w : m.warnings) out += "    warning: " + w + "\n";
  return out;
}

const Program& traced_program(const Matched& m) {
  return m.graph.programs[static_cast<size_t>(m.graph.plan.program_of(m.match.rank))];
}

// The host's pace in the trace, as the scenario's host fields (host_fit.hpp).
std::string host_fields(const HostPaceFit& f) {
  return "\"host\": {\"op_issue\": \"" + fmt("%.1f us", f.op_issue_s * 1e6) + "\", \"kernel_issue\": \"" +
         fmt("%.1f us", f.kernel_issue_s * 1e6) + "\"}";
}

nlohmann::json host_json(const HostPaceFit& f, const TraceMatch& t, const StepGraph& g) {
  double launch_span = 0;
  for (const StepMeasure& s : t.steps) launch_span += s.launch_span_s / std::max(1.0, t.num_steps());
  return {{"launch_span_s", launch_span},          {"launches_per_step", t.launches_per_step},
          {"host_s", t.host_s},                    {"blocked_s", t.host_blocked_s},
          {"num_ops", f.num_ops},                  {"num_kernels", f.num_kernels},
          {"fitted_op_issue_s", f.op_issue_s},     {"fitted_kernel_issue_s", f.kernel_issue_s},
          {"kernel_identified", f.kernel_identified}, {"rms_residual_s", f.rms_residual_s},
          {"scenario_op_issue_s", g.host_op_issue_s}, {"scenario_kernel_issue_s", g.host_kernel_issue_s}};
}

nlohmann::json match_json(const TraceMatch& m) {
  nlohmann::json j;
  j["trace"] = m.trace_file;
  j["rank"] = m.rank;
  j["num_kernels"] = m.num_kernels;
  j["num_matched_kernels"] = m.num_matched_kernels;
  j["kernel_seconds_per_step"] = m.kernel_seconds;
  j["matched_seconds_per_step"] = m.matched_seconds;
  for (const StepMeasure& s : m.steps) {
    j["steps"].push_back({{"name", s.name}, {"host_s", s.host_s}, {"gpu_span_s", s.gpu_span_s},
                          {"gpu_busy_s", s.gpu_busy_s}, {"launch_span_s", s.launch_span_s}, {"num_kernels", s.num_kernels}});
  }
  j["unmatched"] = nlohmann::json::array();
  for (const Unmatched& u : m.unmatched) {
    j["unmatched"].push_back({{"what", u.what}, {"kernel_class", u.kernel_class}, {"num_kernels", u.num_kernels},
                              {"seconds_per_step", u.seconds}});
  }
  j["warnings"] = m.warnings;
  return j;
}

}  // namespace

std::string run_calibrate_from_trace(const TraceCommand& c) {
  if (c.scenarios.size() != c.traces.size() && c.scenarios.size() != 1) {
    throw InputError("--scenario", "", "give one --scenario for all traces or one per --from-trace (" +
                                           std::to_string(c.traces.size()) + " traces, " +
                                           std::to_string(c.scenarios.size()) + " scenarios)");
  }
  std::vector<std::unique_ptr<Matched>> matched;
  std::vector<std::unique_ptr<CostModel>> costs;
  std::vector<TraceFitSource> sources;
  for (size_t i = 0; i < c.traces.size(); ++i) {
    const std::string& sc = c.scenarios.size() == 1 ? c.scenarios.front() : c.scenarios[i];
    matched.push_back(load_matched(c.traces[i], sc, "", c.hardware));
    costs.push_back(std::make_unique<CostModel>(matched.back()->scenario.hardware));
    sources.push_back({&matched.back()->match, &matched.back()->graph, costs.back().get(), matched.back()->scenario.file, {}});
    if (has_power_model(matched.back()->scenario.hardware)) {
      sources.back().power = measured_power_state(matched.back()->scenario.hardware, measured_activity(matched.back()->match));
    }
  }
  const TraceFit fit = fit_calibration_from_traces(sources, c.command);
  std::string summary = "calibrate --from-trace:\n";
  for (const auto& m : matched) summary += match_summary(m->match);
  for (const TraceFitSource& src : sources) {
    if (src.power.solved) summary += "  power state of " + src.match->trace_file + ": " + describe(src.power) + " (tables at the limit's)\n";
  }
  summary += fit.summary;
  // The host's pace belongs to the traced job, not to the hardware: printed for its scenario.
  for (const auto& m : matched) {
    const HostPaceFit h = fit_host_pace(host_pace_rows(m->match, traced_program(*m)));
    summary += "  host pace of " + m->match.trace_file + " (for its scenario, not in the calibration file): " +
               host_fields(h) + (h.kernel_identified ? "" : " (kernel_issue not identified)") + "\n";
  }
  if (c.out.empty()) {
    std::fputs(summary.c_str(), stderr);
    return fit.json;
  }
  write_file_atomically(c.out, fit.json, "--out");
  return summary + "wrote " + c.out + " (name it from a hardware file: \"calibration\": \"PATH\")\n";
}

std::string run_validate_from_trace(const TraceCommand& c) {
  if (c.traces.size() != 1 || c.scenarios.size() != 1) {
    throw InputError("--from-trace", "", "validate reads one trace with one --scenario");
  }
  const std::unique_ptr<Matched> mm = load_matched(c.traces.front(), c.scenarios.front(), c.calibration, c.hardware);
  const Matched& m = *mm;
  const TraceMatch& t = m.match;
  EngineOptions eo;
  eo.record_timeline = true;
  eo.record_memory_ranks = m.graph.plan.num_ranks();
  eo.rank_speed = rank_speeds(m.scenario.spec);
  const CostModel cost(m.scenario.hardware);
  const PoweredSteps powered = simulate_step_in_power_state(m.graph, cost, eo);
  const StepResult& r = powered.results.front();
  const int64_t rank = t.rank;
  const Program& p = traced_program(m);
  const HostPaceFit host = fit_host_pace(host_pace_rows(t, p));

  // Predicted time per op name on the trace's rank.
  std::map<std::string, double> predicted;
  for (const ExecRecord& e : r.timeline.records) {
    if (e.rank != rank) continue;
    predicted[p.name_of(p.ops[e.op])] += static_cast<double>(e.end - e.start) * 1e-12;
  }
  // Per family and per folded op name.
  struct Pair {
    double measured = 0, predicted = 0;
    double host = 0, num_ops = 0;  // per op name: the host's time on its ops (trace), and how many
  };
  std::map<std::string, Pair> families, folded;
  for (const auto& [name, o] : t.ops) {
    const std::string fam(op_family(o.kind));
    const double pr = predicted.contains(name) ? predicted.at(name) : 0;
    // An op the trace has no range (nor kernel) for is left out (the match summary names it); one
    // whose range launched nothing took no GPU time (a residual add's backward).
    if (o.num_kernels == 0 && o.ranges_per_step == 0) continue;
    families[fam].measured += o.seconds;
    families[fam].predicted += pr;
    Pair& f = folded[fold_layer(name)];
    f.measured += o.seconds;
    f.predicted += pr;
    f.host += o.host_s;
    f.num_ops += static_cast<double>(o.num_ops);
  }
  double unmatched_s = 0;
  for (const Unmatched& u : t.unmatched) unmatched_s += u.seconds;

  const double meas_step = t.step_seconds();
  const double pred_step = static_cast<double>(r.step_time) * 1e-12;
  const double step_err = error_of(pred_step, meas_step);
  double meas_busy = 0;
  for (const StepMeasure& s : t.steps) meas_busy += s.gpu_busy_s;
  meas_busy /= std::max(1.0, t.num_steps());
  const RankMemory& mem = r.memory[static_cast<size_t>(rank)];
  const double pred_tensors = mem.peak_hbm_bytes - mem.allocator_reserve_bytes - p.persistent.runtime;
  const bool has_memory = t.peak_allocated_bytes >= 0;
  const double mem_err = has_memory ? error_of(pred_tensors, t.peak_allocated_bytes) : 0;
  // The peak above what the step starts with (measured: the allocator's state when the steps began;
  // predicted: the persistent tensors), which what else the process holds does not move.
  const bool has_start = has_memory && t.start_allocated_bytes >= 0;
  const double pred_start = mem.persistent_bytes - p.persistent.runtime;
  const double meas_above = t.peak_allocated_bytes - t.start_allocated_bytes;
  const double pred_above = pred_tensors - pred_start;
  const double above_err = has_start ? error_of(pred_above, meas_above) : 0;

  std::vector<std::pair<std::string, Pair>> fam_rows(families.begin(), families.end());
  std::sort(fam_rows.begin(), fam_rows.end(), [](const auto& a, const auto& b) {
    return a.second.measured != b.second.measured ? a.second.measured > b.second.measured : a.first < b.first;
  });
  std::vector<std::pair<std::string, Pair>> op_rows(folded.begin(), folded.end());
  std::sort(op_rows.begin(), op_rows.end(), [](const auto& a, const auto& b) {
    return a.second.measured != b.second.measured ? a.second.measured > b.second.measured : a.first < b.first;
  });
  auto family_pass = [&](const Pair& f) {
    return f.measured < kFamilyShare * meas_step || std::fabs(error_of(f.predicted, f.measured)) <= kFamilyTarget;
  };

  if (c.json) {
    nlohmann::json j;
    j["scenario"] = m.scenario.spec.name;
    j["hardware"] = m.scenario.hardware_file;
    j["calibration"] = cost.calibration() ? cost.calibration()->file : "";
    j["trace"] = match_json(t);
    j["step_time"] = {{"measured_s", meas_step}, {"measured_busy_s", meas_busy}, {"measured_ops_s", t.matched_seconds},
                      {"measured_no_op_s", unmatched_s}, {"predicted_s", pred_step},
                      {"error", step_err}, {"pass", std::fabs(step_err) <= kStepTarget}};
    if (has_memory) {
      j["peak_memory"] = {{"measured_allocated_bytes", t.peak_allocated_bytes},
                          {"measured_reserved_bytes", t.peak_reserved_bytes},
                          {"predicted_tensor_bytes", pred_tensors},
                          {"error", mem_err},
                          {"pass", std::fabs(mem_err) <= kStepTarget}};
      if (has_start) {
        j["peak_memory"]["measured_step_start_bytes"] = t.start_allocated_bytes;
        j["peak_memory"]["predicted_step_start_bytes"] = pred_start;
        j["peak_memory"]["measured_above_start_bytes"] = meas_above;
        j["peak_memory"]["predicted_above_start_bytes"] = pred_above;
        j["peak_memory"]["error_above_start"] = above_err;
      }
    }
    j["host"] = host_json(host, t, m.graph);
    j["unmatched_seconds"] = unmatched_s;
    j["families"] = nlohmann::json::array();
    for (const auto& [name, f] : fam_rows) {
      j["families"].push_back({{"family", name}, {"measured_s", f.measured}, {"predicted_s", f.predicted},
                               {"share", meas_step > 0 ? f.measured / meas_step : 0},
                               {"error", error_of(f.predicted, f.measured)}, {"pass", family_pass(f)}});
    }
    j["ops"] = nlohmann::json::array();
    for (const auto& [name, f] : op_rows) {
      j["ops"].push_back({{"name", name}, {"measured_s", f.measured}, {"predicted_s", f.predicted},
                          {"error", error_of(f.predicted, f.measured)}, {"num_ops", f.num_ops},
                          {"measured_host_s", f.host}});
    }
    return j.dump(2) + "\n";
  }

  std::string out = m.scenario.spec.name + ": PyTorch trace vs simulator (" + m.scenario.hardware_file + ", " +
                    (cost.calibration() ? "calibration " + cost.calibration()->file : std::string("no calibration file")) +
                    ")\n";
  out += match_summary(t);
  out += "  step time      measured " + fmt("%.4f s", meas_step) + " (GPU span, median of " +
         std::to_string(t.steps.size()) + "; kernels busy " + fmt("%.4f s", meas_busy) + "), predicted " +
         fmt("%.4f s", pred_step) + ", error " + pct(step_err) + "  [" +
         (std::fabs(step_err) <= kStepTarget ? "pass" : "FAIL") + ", target 5%]\n";
  if (m.scenario.hardware.device.power) out += "  power state    " + describe(powered.state) + "\n";
  // Where the measured step goes: the scenario's ops (what the simulator predicts), kernels of no
  // op, and the GPU idle (the span less the busy time; overlapping streams make the parts approximate).
  out += "                 measured = scenario's ops " + fmt("%.4f s", t.matched_seconds) + " + kernels of no op " +
         fmt("%.4f s", unmatched_s) + " + GPU idle " + fmt("%.4f s", std::max(0.0, meas_step - meas_busy)) + "\n";
  if (meas_step > 0 && meas_busy < 0.9 * meas_step) {
    out += "                 the GPU idles " + fmt("%.0f%%", 100 * (1 - meas_busy / meas_step)) +
           " of the measured step (host-bound launches?)\n";
  }
  // The host's pace: its time on the scenario's ops, and the scenario's host fields fitted to it
  // (host_fit.hpp; docs/modelling.md, "The host issuing ops").
  double launch_span = 0;
  for (const StepMeasure& s : t.steps) launch_span += s.launch_span_s / std::max(1.0, t.num_steps());
  out += "  host           launches span " + fmt("%.4f s", launch_span) + " per step (" +
         fmt("%.0f", t.launches_per_step) + " launch calls); the host's time on the scenario's " +
         fmt("%.0f", host.num_ops) + " ops (" + fmt("%.0f", host.num_kernels) + " kernels in the graph) " +
         fmt("%.4f s", t.host_s) + (t.host_blocked_s > 0 ? ", " + fmt("%.4f s", t.host_blocked_s) + " waiting in synchronous copies left out" : "") +
         "\n                 fitted " + host_fields(host) + (host.kernel_identified ? "" : " (kernel_issue not identified)") +
         fmt(", rms %.0f us per op", host.rms_residual_s * 1e6) + "; the scenario's: op_issue " +
         fmt("%.1f us", m.graph.host_op_issue_s * 1e6) + ", kernel_issue " + fmt("%.1f us", m.graph.host_kernel_issue_s * 1e6) + "\n";
  if (has_memory) {
    out += "  peak memory    allocated " + fmt("%.3f GB", t.peak_allocated_bytes / 1e9) + " (reserved " +
           fmt("%.3f GB", t.peak_reserved_bytes / 1e9) + "), predicted tensors " + fmt("%.3f GB", pred_tensors / 1e9) +
           ", error " + pct(mem_err) + "  [" + (std::fabs(mem_err) <= kStepTarget ? "pass" : "FAIL") + ", target 5%]\n";
    if (has_start) {
      out += "                 above the step's start: measured " + fmt("%.3f GB", meas_above / 1e9) + ", predicted " +
             fmt("%.3f GB", pred_above / 1e9) + ", error " + pct(above_err) + " (at the start: measured " +
             fmt("%.3f GB", t.start_allocated_bytes / 1e9) + ", predicted persistent " + fmt("%.3f GB", pred_start / 1e9) +
             ")\n";
    }
  } else {
    out += "  peak memory    the trace has no memory events (profile_memory=True records them)\n";
  }
  out += "  per op family (GPU time per step; families of at least 1% of the step within 10%):\n";
  out += "    " + pad("family", 20) + "measured    predicted   error    share\n";
  for (const auto& [name, f] : fam_rows) {
    out += "    " + pad(name, 20) + fmt("%9.3f ms", f.measured * 1e3) + fmt("  %9.3f ms", f.predicted * 1e3) + "  " +
           pad(pct(error_of(f.predicted, f.measured)), 8) + fmt("%5.1f%%", meas_step > 0 ? 100 * f.measured / meas_step : 0) +
           (family_pass(f) ? "" : "  FAIL") + "\n";
  }
  out += "    " + pad("(not matched)", 20) + fmt("%9.3f ms", unmatched_s * 1e3) + "  " + pad("", 12) + "  no op of the scenario\n";
  out += "  per op (all layers and micro-batches together; error = predicted/measured - 1):\n";
  size_t shown = 0;
  for (const auto& [name, f] : op_rows) {
    if (shown++ == 25) {
      out += "    ... " + std::to_string(op_rows.size() - 25) + " more (--json lists them)\n";
      break;
    }
    out += "    " + pad(name, 44) + fmt("%9.3f ms", f.measured * 1e3) + fmt("  %9.3f ms", f.predicted * 1e3) + "  " +
           pct(error_of(f.predicted, f.measured)) + "\n";
  }
  return out;
}

}  // namespace moesim
