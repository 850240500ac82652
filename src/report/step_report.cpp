// SPDX-License-Identifier: MIT
#include "report/step_report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/units.hpp"
#include "scenario/device_spread.hpp"

namespace moesim {
namespace {

double ps_to_s(Picoseconds t) { return static_cast<double>(t) * 1e-12; }

// Nearest-rank percentile of sorted values.
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

std::string category(OpKind k) {
  switch (k) {
    case OpKind::gemm:
    case OpKind::lora_gemm:
    case OpKind::router: return "gemm";
    case OpKind::grouped_gemm: return "grouped_gemm";
    case OpKind::flash_attention:
    case OpKind::sparse_attention:
    case OpKind::dsa_indexer:
    case OpKind::indexer_score:
    case OpKind::topk:
    case OpKind::kv_gather: return "attention";
    case OpKind::kda:
    case OpKind::kda_gate_cumsum:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::kda_state_correction:
    case OpKind::short_conv: return "linear_attention";
    case OpKind::cross_entropy:
    case OpKind::cce_loss: return "loss";
    case OpKind::optimizer:
    case OpKind::host_optimizer: return "optimizer";
    case OpKind::grad_accumulate:
    case OpKind::dp_copy: return "data_parallel";
    case OpKind::permute:
    case OpKind::unpermute: return "permute";
    case OpKind::embedding:
    case OpKind::norm:
    case OpKind::activation:
    case OpKind::elementwise:
    case OpKind::attention_residual:
    case OpKind::swap_out:
    case OpKind::swap_in:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_reduce:
    case OpKind::all_to_all:
    case OpKind::send:
    case OpKind::recv: return "elementwise";
  }
  return "elementwise";  // unreachable: every OpKind is listed above
}

// A report states only what can be true: no device computes faster than its peak, the compute
// stream's time splits exactly into computing and what it waited for, and no rank holds negative
// memory. A broken law is a defect of the simulator, reported as one (never a printed number).
void check_report(const StepReport& r, const std::vector<StepResult>& steps) {
  std::string broken;
  constexpr double tol = 1e-9;
  if (r.mfu > 1 + tol) broken += " MFU " + std::to_string(r.mfu) + " > 1;";
  if (r.hfu > 1 + tol) broken += " HFU " + std::to_string(r.hfu) + " > 1;";
  for (const StepResult& st : steps) {
    Picoseconds accounted = st.compute_stream_busy;
    for (const auto& [cause, t] : st.exposed) {
      accounted += t;
      if (t < 0) broken += " negative exposed time for " + cause + ";";
    }
    if (accounted != st.step_time) {
      broken += " compute " + std::to_string(st.compute_stream_busy) + " ps + exposed time != step " +
                std::to_string(st.step_time) + " ps;";
    }
    for (size_t rank = 0; rank < st.memory.size(); ++rank) {
      if (st.memory[rank].min_hbm_bytes < -1.0) {  // a byte of rounding over a step's sums
        broken += " rank " + std::to_string(rank) + " holds negative HBM (" + std::to_string(st.memory[rank].min_hbm_bytes) +
                  " bytes);";
      }
    }
  }
  if (!broken.empty()) throw std::logic_error("step report of '" + r.scenario + "' breaks its invariants:" + broken);
}

}  // namespace

// Inputs a scenario states that no op of the step reflects: said in every report, never silent.
std::vector<std::string> not_modelled(const Scenario& s) {
  std::vector<std::string> out;
  if (s.model.vision) {
    out.push_back("the vision encoder: the step is text only, without its ops or its weights in memory");
  }
  if (s.model.moe && s.spec.parallel.ep == 1 && s.spec.routing.capacity_factor &&
      s.spec.routing.capacity_policy == CapacityPolicy::drop) {
    out.push_back("routing.capacity_factor (drop) without expert parallelism: every rank computes its experts' dropless loads");
  }
  return out;
}

StepReport make_step_report(const Scenario& s, const StepGraph& g, const GraphStats& stats,
                            const std::vector<StepResult>& steps, double sim_wall_s) {
  StepReport r;
  r.not_modelled = not_modelled(s);
  r.scenario = s.spec.name;
  r.model = s.model.name;
  r.hardware = s.hardware.name;
  r.error_band = error_band_for(s.hardware.name);
  r.num_devices = g.plan.num_ranks();
  r.num_sampled_steps = static_cast<int64_t>(steps.size());
  r.tokens_per_step = g.tokens_per_step;
  for (const StepResult& st : steps) r.step_times_s.push_back(ps_to_s(st.step_time));
  double sum = 0;
  for (double t : r.step_times_s) sum += t;
  r.step_time_s = sum / static_cast<double>(r.step_times_s.size());
  r.step_time_p50_s = percentile(r.step_times_s, 50);
  r.step_time_p99_s = percentile(r.step_times_s, 99);
  r.tokens_per_s = static_cast<double>(r.tokens_per_step) / r.step_time_s;
  if (std::any_of(steps.begin(), steps.end(), [](const StepResult& st) { return st.ep_load_imbalance > 0; })) {
    for (const StepResult& st : steps) r.ep_load_imbalance.push_back(st.ep_load_imbalance);
    r.ep_load_imbalance_p50 = percentile(r.ep_load_imbalance, 50);
    r.ep_load_imbalance_p99 = percentile(r.ep_load_imbalance, 99);
  }
  if (const std::vector<double> slowdown = rank_compute_slowdowns(s); !slowdown.empty()) {
    const auto slowest = std::max_element(slowdown.begin(), slowdown.end());
    r.slow_part_rank = static_cast<int32_t>(slowest - slowdown.begin());
    r.slow_part_slowdown = *slowest;
  }
  r.speed_spread = s.hardware.device.speed_spread;
  r.model_flops_per_step = stats.model_flops_per_step;
  r.flops_per_step = stats.flops_per_step;
  const auto peak = s.hardware.device.peak_flops.of(s.spec.training.precision.compute);
  r.peak_flops_per_device = peak ? peak->value : s.hardware.device.peak_flops.bf16.value;
  const double capacity = r.step_time_s * static_cast<double>(r.num_devices) * r.peak_flops_per_device;
  r.mfu = r.model_flops_per_step / capacity;
  r.hfu = r.flops_per_step / capacity;
  r.hbm_capacity_bytes = s.hardware.device.hbm_capacity.value;
  r.ddr_capacity_bytes = s.hardware.device.host_memory.capacity_per_device.value;
  for (const StepResult& st : steps) {
    for (size_t rank = 0; rank < st.memory.size(); ++rank) {
      const RankMemory& m = st.memory[rank];
      r.peak_ddr_bytes = std::max(r.peak_ddr_bytes, m.peak_ddr_bytes);
      if (m.peak_hbm_bytes <= r.peak_hbm_bytes) continue;
      r.peak_hbm_bytes = m.peak_hbm_bytes;
      r.peak_rank = static_cast<int32_t>(rank);
      r.persistent_bytes = m.persistent_bytes;
      r.peak_time_s = ps_to_s(m.peak_time);
      const Program& p = g.programs[static_cast<size_t>(g.plan.program_of(static_cast<int64_t>(rank)))];
      r.peak_op = p.name_of(p.ops[m.peak_op]);
      r.memory_at_peak = {{"params", p.persistent.params},
                          {"master_params", p.persistent.master_params},
                          {"grads", p.persistent.grads},
                          {"optimizer_states", p.persistent.optimizer_states},
                          {"runtime", p.persistent.runtime}};
      for (const auto& [name, category] : EnumNames<MemCategory>::names) {
        const double bytes = m.peak_transient[static_cast<size_t>(category)];
        if (bytes != 0) r.memory_at_peak.emplace_back(std::string(name), bytes);
      }
      r.memory_at_peak.emplace_back("allocator_reserve", m.allocator_reserve_bytes);
    }
  }
  r.fits = r.peak_hbm_bytes <= r.hbm_capacity_bytes && r.peak_ddr_bytes <= r.ddr_capacity_bytes;
  r.domain_size = s.hardware.fabric.scale_up.domain_size;
  std::array<bool, kNumGroupKinds> used{};
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) {
      if (is_communication(op.kind)) used[static_cast<size_t>(op.group)] = true;
    }
  }
  for (const auto& [name, kind] : EnumNames<GroupKind>::names) {
    if (!used[static_cast<size_t>(kind)] || g.plan.group_size(kind) <= 1) continue;
    const GroupPlacement gp = placement_of(g.plan.members(0, kind), r.domain_size);
    if (gp.num_domains > 1) r.groups_across_domains.push_back({std::string(name), gp.size, gp.num_domains});
  }
  const StepResult& first = steps.front();
  std::map<std::string, double> compute;
  for (const auto& [kind, t] : first.compute_busy) {
    if (kind == OpKind::swap_in || kind == OpKind::swap_out) {
      r.swap_s += ps_to_s(t);
    } else {
      compute[category(kind)] += ps_to_s(t);
    }
  }
  r.compute_s.assign(compute.begin(), compute.end());
  for (const auto& [kind, t] : first.comm_busy) r.communication_s.emplace_back(std::string(enum_name(kind)), ps_to_s(t));
  r.breakdown_rank = first.slowest_rank;
  r.compute_stream_s = ps_to_s(first.compute_stream_busy);
  for (const auto& [cause, t] : first.exposed) {
    r.exposed_s.emplace_back(cause, ps_to_s(t));
    if (cause == "pipeline_bubble") {
      r.bubble_s += ps_to_s(t);
    } else if (cause != "swap" && cause != "other") {
      r.exposed_comm_s += ps_to_s(t);
    }
  }
  for (const auto& [name, t] : first.top_ops) r.top_ops_s.emplace_back(name, ps_to_s(t));
  for (const auto& [name, t] : first.critical_path) r.critical_path_s.emplace_back(name, ps_to_s(t));
  r.critical_path_length = first.critical_path_length;
  r.sim_wall_s = sim_wall_s;
  for (const StepResult& st : steps) r.num_events += st.num_events;
  r.num_simulated_ranks = steps.front().num_simulated_ranks;
  check_report(r, steps);
  return r;
}

std::string step_report_text(const StepReport& r) {
  std::ostringstream out;
  char line[256];
  out << r.scenario << ": " << r.model << " on " << r.num_devices << " x " << r.hardware << "\n";
  std::snprintf(line, sizeof line, "  step time         %.3f s mean, %.3f s P50, %.3f s P99 over %lld sampled step(s)\n",
                r.step_time_s, r.step_time_p50_s, r.step_time_p99_s, static_cast<long long>(r.num_sampled_steps));
  out << line;
  out << "  error band        " << error_band_line(r.error_band) << "\n";
  if (!r.error_band.families.empty()) {
    out << "    by op family   ";
    for (const auto& [family, e] : r.error_band.families) {
      std::snprintf(line, sizeof line, " %s %+.1f%% .. %+.1f%%%s", family.c_str(), 100 * e.low, 100 * e.high,
                    &family == &r.error_band.families.back().first ? "\n" : ",");
      out << line;
    }
  }
  std::snprintf(line, sizeof line, "  throughput        %.4g tokens/s (%.4g tokens per step)\n", r.tokens_per_s,
                static_cast<double>(r.tokens_per_step));
  out << line;
  if (!r.ep_load_imbalance.empty()) {
    std::snprintf(line, sizeof line,
                  "  expert load       busiest EP rank %.3fx the balanced load P50, %.3fx P99 (mean over MoE layers)\n",
                  r.ep_load_imbalance_p50, r.ep_load_imbalance_p99);
    out << line;
  }
  if (r.slow_part_rank >= 0) {
    std::snprintf(line, sizeof line,
                  "  slowest part      rank %d, compute-bound kernels %.3fx as long: the expected slowest of %lld parts "
                  "(device.speed_spread %.1f%%)\n",
                  r.slow_part_rank, r.slow_part_slowdown, static_cast<long long>(r.num_devices), 100 * r.speed_spread);
    out << line;
  }
  std::snprintf(line, sizeof line, "  MFU               %.1f%%   (HFU %.1f%%, peak %s per device)\n", 100 * r.mfu,
                100 * r.hfu, format_quantity(r.peak_flops_per_device, Dimension::flops_per_s).c_str());
  out << line;
  if (r.power) {
    out << "  power state       " << describe(*r.power);
    if (r.power->solved) out << " (" << r.power_runs << " simulation" << (r.power_runs == 1 ? "" : "s") << ")";
    out << "\n";
  }
  out << "  memory            peak HBM " << format_quantity(r.peak_hbm_bytes, Dimension::bytes) << " of "
      << format_quantity(r.hbm_capacity_bytes, Dimension::bytes) << " (rank " << r.peak_rank << ", at " << r.peak_op
      << "; persistent " << format_quantity(r.persistent_bytes, Dimension::bytes) << "), host DDR "
      << format_quantity(r.peak_ddr_bytes, Dimension::bytes) << " of " << format_quantity(r.ddr_capacity_bytes, Dimension::bytes)
      << " -> " << (r.fits ? "fits" : "DOES NOT FIT") << "\n";
  for (const auto& sg : r.groups_across_domains) {
    out << "  placement         " << sg.kind << " group of " << sg.size << " ranks spans " << sg.num_domains
        << " scale-up domains of " << r.domain_size << " (its collectives cross the scale-out network)\n";
  }
  out << "  HBM at the peak  ";
  for (size_t i = 0; i < r.memory_at_peak.size(); ++i) {
    out << (i == 0 ? " " : ", ") << r.memory_at_peak[i].first << " "
        << format_quantity(r.memory_at_peak[i].second, Dimension::bytes);
  }
  out << "\n";
  out << "  breakdown (rank " << r.breakdown_rank << ", which ends the step):\n";
  for (const auto& [name, t] : r.compute_s) {
    std::snprintf(line, sizeof line, "    compute %-22s %9.3f s\n", name.c_str(), t);
    out << line;
  }
  for (const auto& [name, t] : r.communication_s) {
    std::snprintf(line, sizeof line, "    comm    %-22s %9.3f s busy\n", name.c_str(), t);
    out << line;
  }
  std::snprintf(line, sizeof line, "    swap copies                    %9.3f s busy\n", r.swap_s);
  out << line;
  std::snprintf(line, sizeof line, "  compute stream    %.3f s computing; not computing, by what it waited for:\n",
                r.compute_stream_s);
  out << line;
  for (const auto& [cause, t] : r.exposed_s) {
    std::snprintf(line, sizeof line, "    exposed %-22s %9.3f s\n", cause.c_str(), t);
    out << line;
  }
  out << "  critical path (" << r.critical_path_length << " ops; time by op, all layers together):\n";
  for (const auto& [name, t] : r.critical_path_s) {
    std::snprintf(line, sizeof line, "    %-52s %9.3f s\n", name.c_str(), t);
    out << line;
  }
  for (const std::string& what : r.not_modelled) out << "  not modelled      " << what << "\n";
  std::snprintf(line, sizeof line, "  simulated in      %.3f s (%lld events, %lld of %lld ranks simulated)\n", r.sim_wall_s,
                static_cast<long long>(r.num_events), static_cast<long long>(r.num_simulated_ranks),
                static_cast<long long>(r.num_devices));
  out << line;
  return out.str();
}

std::string step_report_json(const StepReport& r) {
  nlohmann::json j;
  j["scenario"] = r.scenario;
  j["model"] = r.model;
  j["hardware"] = r.hardware;
  j["num_devices"] = r.num_devices;
  j["num_sampled_steps"] = r.num_sampled_steps;
  j["step_times_s"] = r.step_times_s;
  j["step_time_s"] = r.step_time_s;
  j["step_time_p50_s"] = r.step_time_p50_s;
  j["step_time_p99_s"] = r.step_time_p99_s;
  {
    const ErrorBand& b = r.error_band;
    nlohmann::json band;
    band["validated"] = b.validated;
    band["hardware"] = b.hardware;
    if (b.validated) {
      auto range = [](const ErrorRange& e) { return nlohmann::json{{"low", e.low}, {"high", e.high}, {"num_runs", e.num_runs}}; };
      band["basis"] = b.basis;
      band["source"] = b.source;
      band["step"] = range(b.step);
      nlohmann::json families = nlohmann::json::object();
      for (const auto& [family, e] : b.families) families[family] = range(e);
      band["families"] = families;
      band["tie_fraction"] = b.tie_fraction;
    }
    j["error_band"] = band;
  }
  j["tokens_per_step"] = r.tokens_per_step;
  j["tokens_per_s"] = r.tokens_per_s;
  if (!r.ep_load_imbalance.empty()) {
    j["ep_load_imbalance"] = {{"per_step", r.ep_load_imbalance},
                              {"p50", r.ep_load_imbalance_p50},
                              {"p99", r.ep_load_imbalance_p99}};
  }
  if (r.slow_part_rank >= 0) {
    j["slowest_part"] = {{"rank", r.slow_part_rank}, {"compute_slowdown", r.slow_part_slowdown}, {"speed_spread", r.speed_spread}};
  }
  j["model_flops_per_step"] = r.model_flops_per_step;
  j["flops_per_step"] = r.flops_per_step;
  j["peak_flops_per_device"] = r.peak_flops_per_device;
  j["mfu"] = r.mfu;
  j["hfu"] = r.hfu;
  if (r.power) {
    j["power_state"] = *r.power;
    j["power_state"]["simulations"] = r.power_runs;
  }
  j["peak_hbm_bytes"] = r.peak_hbm_bytes;
  j["hbm_capacity_bytes"] = r.hbm_capacity_bytes;
  j["peak_ddr_bytes"] = r.peak_ddr_bytes;
  j["ddr_capacity_bytes"] = r.ddr_capacity_bytes;
  j["persistent_bytes"] = r.persistent_bytes;
  j["fits"] = r.fits;
  j["groups_across_domains"] = nlohmann::json::array();
  for (const auto& sg : r.groups_across_domains) {
    j["groups_across_domains"].push_back({{"kind", sg.kind}, {"size", sg.size}, {"num_domains", sg.num_domains}});
  }
  j["peak_hbm"] = {{"rank", r.peak_rank}, {"op", r.peak_op}, {"time_s", r.peak_time_s}};
  j["memory_at_peak_bytes"] = nlohmann::json::object();
  for (const auto& [part, bytes] : r.memory_at_peak) j["memory_at_peak_bytes"][part] = bytes;
  nlohmann::json breakdown;
  for (const auto& [name, t] : r.compute_s) breakdown["compute"][name] = t;
  for (const auto& [name, t] : r.communication_s) breakdown["communication_busy"][name] = t;
  breakdown["swap_busy"] = r.swap_s;
  breakdown["compute_stream"] = r.compute_stream_s;
  breakdown["exposed"] = nlohmann::json::object();
  double exposed_total = 0;
  for (const auto& [cause, t] : r.exposed_s) {
    breakdown["exposed"][cause] = t;
    exposed_total += t;
  }
  breakdown["exposed_total"] = exposed_total;
  breakdown["exposed_comm"] = r.exposed_comm_s;
  breakdown["bubble"] = r.bubble_s;
  breakdown["rank"] = r.breakdown_rank;
  j["breakdown_s"] = breakdown;
  auto ops = [](const std::vector<std::pair<std::string, double>>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& [name, t] : v) a.push_back({{"op", name}, {"time_s", t}});
    return a;
  };
  j["critical_path"] = ops(r.critical_path_s);
  j["critical_path_length"] = r.critical_path_length;
  j["not_modelled"] = r.not_modelled;
  j["busiest_ops"] = ops(r.top_ops_s);
  j["sim_wall_s"] = r.sim_wall_s;
  j["num_events"] = r.num_events;
  j["num_simulated_ranks"] = r.num_simulated_ranks;
  return j.dump(2) + "\n";
}

}  // namespace moesim
