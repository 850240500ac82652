// SPDX-License-Identifier: MIT
#include "trace/trace_fit.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/enum_names.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "cost/calibration.hpp"
#include "trace/host_fit.hpp"

namespace moesim {
namespace {

using nlohmann::json;

struct Sample {
  std::string op;
  std::string trace;
  double x = 0;
  double y = 0;
  double seconds = 0;  // per op, measured
  double work = 0;     // flops or bytes: y = work / time
};

struct Table {
  std::string measure, value;
  bool bf16 = true;
  std::vector<Sample> samples;
};

// Ops that share a size measure (GEMMs of one min(m, n, k); a norm and an activation moving the
// same bytes) get one point: their total work over their total time (a work-weighted harmonic
// mean), so that the ops at that point take together the time they took in the trace.
json table_json(const Table& t) {
  std::map<double, std::pair<double, double>> by_x;  // x -> (work, time)
  for (const Sample& s : t.samples) {
    by_x[s.x].first += s.work;
    by_x[s.x].second += s.work / s.y;
  }
  json points = json::array();
  for (const auto& [x, wt] : by_x) points.push_back({x, wt.first / wt.second});
  json samples = json::array();
  for (const Sample& s : t.samples) {
    samples.push_back({{"op", s.op}, {"trace", s.trace}, {"x", s.x}, {"seconds", s.seconds}, {"y", s.y}});
  }
  json j = {{"measure", t.measure}, {"value", t.value}, {"points", points}, {"samples", samples}};
  if (t.bf16) j["dtype"] = "bf16";
  return j;
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

StepActivity measured_activity(const TraceMatch& match) {
  StepActivity a;
  for (const auto& [name, o] : match.ops) {
    const PowerClass c = is_communication(o.kind) ? PowerClass::memory : power_class(o.kind);
    a.busy[static_cast<size_t>(c)] += o.seconds;
  }
  double busy = 0;
  for (const StepMeasure& s : match.steps) busy += s.gpu_busy_s;
  busy /= std::max(1.0, match.num_steps());
  a.idle = std::max(0.0, match.step_seconds() - busy);
  return a;
}

TraceFit fit_calibration_from_traces(const std::vector<TraceFitSource>& sources, const std::string& command) {
  Table gemm{"min_mnk", "flops_per_s", true, {}}, grouped{"rows_per_group", "flops_per_s", true, {}};
  Table memory{"bytes", "bytes_per_s", false, {}};
  std::map<std::pair<std::string, std::string>, Table> attention;  // (kind, forward|backward)
  std::map<std::string, Table> cce;                                // by pass (CcePass)
  // (kind, or kind:width for a norm's width, forward|backward)
  std::map<std::pair<std::string, std::string>, Table> memory_by_kind;
  std::map<std::pair<std::string, int64_t>, Table> collectives;    // (kind, group size)
  std::vector<std::string> skipped;
  json traces = json::array();
  for (const TraceFitSource& src : sources) {
    const TraceMatch& m = *src.match;
    const StepGraph& g = *src.graph;
    const CostModel& cost = *src.cost;
    const Program& p = g.programs[static_cast<size_t>(g.plan.program_of(m.rank))];
    const double launch = cost.hardware().device.kernel_launch_overhead.value;
    // The host's pace is the traced job's (its scenario's host fields), recorded here, not applied.
    const HostPaceFit host = fit_host_pace(host_pace_rows(m, p));
    traces.push_back({{"trace", m.trace_file}, {"scenario", src.scenario}, {"rank", m.rank},
                      {"steps", m.steps.size()}, {"step_gpu_s", m.step_seconds()},
                      {"host", {{"op_issue_s", host.op_issue_s}, {"kernel_issue_s", host.kernel_issue_s}}}});
    if (src.power.solved) {
      traces.back()["power_state"] = src.power;
    }
    // A compute-bound point at the reference state: the traced rate over the step's rate.
    // (Attention tables by bytes are memory-bound work: the cost model does not scale them.)
    auto reference = [&](const Op& op, double y) {
      if (is_calibrated_attention_kind(op.kind) && attention_table_counts_bytes(op.kind)) return y;
      return y / src.power.rate_of(power_class(op.kind));
    };
    std::unordered_map<std::string, uint32_t> first_op;
    // The passes an op name runs in (bit 0 forward, bit 1 backward): FSDP2's all-gather copy of a
    // unit is one name in forward and again in backward, measured as one.
    std::unordered_map<std::string, unsigned> passes;
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      first_op.try_emplace(p.name_of(p.ops[i]), i);
      passes[p.name_of(p.ops[i])] |= p.ops[i].phase == Phase::bwd ? 2u : 1u;
    }
    for (const auto& [name, o] : m.ops) {
      if (o.num_kernels == 0 || o.seconds <= 0) continue;
      const Op& op = p.ops[first_op.at(name)];
      const double t = o.per_op_seconds();
      Sample s{name, m.trace_file, 0, 0, 0, 0};
      s.seconds = t;
      if (is_communication(op.kind)) {
        const int64_t n = g.plan.group_size(op.group);
        if (!is_collective(op.kind) || n < 2 || op.comm_bytes <= 0) continue;
        s.x = op.comm_bytes;
        s.y = CostModel::bus_factor(op.kind, n) * op.comm_bytes / t;
        s.work = CostModel::bus_factor(op.kind, n) * op.comm_bytes;
        Table& tab = collectives[{std::string(enum_name(op.kind)), n}];
        tab.measure = "bytes";
        tab.value = "busbw_bytes_per_s";
        tab.bf16 = false;
        tab.samples.push_back(s);
        continue;
      }
      if (op.kind == OpKind::swap_in || op.kind == OpKind::swap_out) continue;
      const double work_s = t - launch * static_cast<double>(std::max(op.num_kernels, 1));  // as the cost model adds
      if (!(work_s > 0)) {
        skipped.push_back(fold_layer(name) + " (" + fmt("%.1f us", t * 1e6) + ", within the launch overhead)");
        continue;
      }
      const auto [curve, x] = cost.curve_of(op);
      const bool bf16 = op.dtype == Dtype::bf16;
      if (bf16 && op.flops > 0 && is_calibrated_attention_kind(op.kind)) {
        s.x = std::max(static_cast<double>(op.m), 1.0);
        s.y = reference(op, op.flops / work_s);
        s.work = op.flops;
        Table& tab = attention[{std::string(enum_name(op.kind)), op.phase == Phase::bwd ? "backward" : "forward"}];
        tab.measure = "query_rows";
        tab.value = "flops_per_s";
        tab.samples.push_back(s);
      } else if (bf16 && op.flops > 0 && op.kind == OpKind::cce_loss) {
        // The loss measured whole at its hidden size, per pass, where the cost model reads it.
        s.x = static_cast<double>(op.k);
        s.y = reference(op, op.flops / work_s);
        s.work = op.flops;
        Table& tab = cce[std::string(enum_name(cce_pass_of(op)))];
        tab.measure = "hidden_size";
        tab.value = "flops_per_s";
        tab.samples.push_back(s);
      } else if (bf16 && op.flops > 0 && (curve == CostModel::Curve::gemm || curve == CostModel::Curve::grouped_gemm)) {
        s.x = x;
        s.y = reference(op, op.flops / work_s);
        s.work = op.flops;
        (curve == CostModel::Curve::gemm ? gemm : grouped).samples.push_back(s);
      } else if (op.bytes_read + op.bytes_written > 0) {
        s.x = op.bytes_read + op.bytes_written;
        s.y = s.x / work_s;
        s.work = s.x;
        memory.samples.push_back(s);
        // The same point in its kind's table and, for a norm, its row width's, which the cost
        // model reads first (calibration.hpp); the table of all kinds stays for kinds the trace
        // did not run, the kind's for widths it did not run.
        std::vector<std::string> tables{std::string(enum_name(op.kind))};
        if (const int64_t width = memory_table_width(op); width > 0) tables.push_back(tables[0] + ":" + std::to_string(width));
        for (const unsigned pass : {1u, 2u}) {
          if (!is_memory_bound_kind(op.kind) || !(passes.at(name) & pass)) continue;
          const std::string phase = pass == 2u ? "backward" : "forward";
          for (const std::string& table : tables) {
            memory_by_kind.try_emplace({table, phase}, Table{"bytes", "bytes_per_s", false, {}}).first->second.samples.push_back(s);
          }
        }
      } else {
        skipped.push_back(fold_layer(name) + " (no work the cost model reads)");
      }
    }
  }

  json root = {{"format", "moesim-calibration"}, {"version", 6}};
  root["provenance"] = {{"source", "PyTorch profiler trace (moesim calibrate --from-trace)"},
                        {"traces", traces},
                        {"command", command},
                        {"date", utc_now()}};
  TraceFit fit;
  std::string summary;
  auto add = [&](json& where, const std::string& key, const Table& t, const std::string& label) {
    if (t.samples.empty()) return;
    where[key] = table_json(t);
    const json& pts = where[key]["points"];
    fit.num_points += static_cast<int64_t>(pts.size());
    summary += "  " + label + std::string(label.size() < 34 ? 34 - label.size() : 1, ' ') + std::to_string(pts.size()) +
               " point(s) from " + std::to_string(t.samples.size()) + " op(s), " + t.measure + " " +
               fmt("%g", pts.front()[0].get<double>()) + " .. " + fmt("%g", pts.back()[0].get<double>()) + "\n";
  };
  json kernels = json::object();
  add(kernels, "gemm", gemm, "kernels/gemm");
  add(kernels, "grouped_gemm", grouped, "kernels/grouped_gemm");
  add(kernels, "memory", memory, "kernels/memory");
  for (const auto& [pass, t] : cce) {
    if (!kernels.contains("cce")) kernels["cce"] = json::object();
    add(kernels["cce"], pass, t, "kernels/cce/" + pass);
  }
  for (const auto& [key, t] : memory_by_kind) {
    if (!kernels.contains("memory_by_kind")) kernels["memory_by_kind"] = json::object();
    json& by_kind = kernels["memory_by_kind"];
    if (!by_kind.contains(key.first)) by_kind[key.first] = json::object();
    add(by_kind[key.first], key.second, t, "kernels/memory_by_kind/" + key.first + "/" + key.second);
  }
  if (!kernels.empty()) root["kernels"] = kernels;
  json att = json::object();
  for (const auto& [key, t] : attention) {
    if (!att.contains(key.first)) att[key.first] = json::object();
    add(att[key.first], key.second, t, "attention/" + key.first + "/" + key.second);
  }
  if (!att.empty()) root["attention"] = att;
  json coll = json::object();
  for (const auto& [key, t] : collectives) {
    if (!coll.contains(key.first)) coll[key.first] = json::object();
    add(coll[key.first], std::to_string(key.second), t, "collectives/" + key.first + "/" + std::to_string(key.second));
  }
  if (!coll.empty()) root["collectives"] = coll;
  if (fit.num_points == 0) {
    throw InputError(sources.front().match->trace_file, "",
                     "no op of the scenario was measured: nothing to fit (are the record_function ranges named as "
                     "the scenario's ops? see docs/calibration/from-trace.md)");
  }
  fit.json = root.dump(1) + "\n";
  // The file must read back as the cost model reads it (sorted, positive, finite points).
  (void)load_calibration(InputText{"(fitted calibration)", fit.json, false});
  fit.summary = "fitted " + std::to_string(fit.num_points) + " calibration point(s):\n" + summary;
  if (!skipped.empty()) {
    std::sort(skipped.begin(), skipped.end());
    skipped.erase(std::unique(skipped.begin(), skipped.end()), skipped.end());
    fit.summary += "  not fitted: ";
    for (size_t i = 0; i < skipped.size(); ++i) fit.summary += (i ? ", " : "") + skipped[i];
    fit.summary += "\n";
  }
  return fit;
}

}  // namespace moesim
