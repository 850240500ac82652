// SPDX-License-Identifier: MIT
#include "app/fusion_command.hpp"

#include <cstdio>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "analysis/fusion.hpp"
#include "analysis/known_fusions.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"
#include "core/units.hpp"
#include "graph/graph_json.hpp"
#include "scenario/device_spread.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

CLI::App* add_fusion_command(CLI::App& app, FusionCliOptions& opt) {
  auto* cmd = app.add_subcommand(
      "fusion", "Fusion candidates of the step graph by rule, each re-simulated: step-time and peak-memory gains");
  cmd->add_option("SCENARIO", opt.scenario, "Scenario file or shipped name (default: the embedded default)");
  cmd->add_flag("--json", opt.json, "JSON output");
  cmd->add_option("--top", opt.top, "Candidates listed and taken into the greedy cumulative order")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  cmd->add_flag("--rank-order", opt.rank_order,
                "Cumulative order = the order of the gains alone (top simulations instead of top^2/2)");
  cmd->add_flag("--distinct-ranks", opt.distinct_ranks,
                "Simulate one representative per class of interchangeable ranks (as simulate --distinct-ranks)");
  cmd->add_option("--apply", opt.apply, "Write the graph with the first N candidates of the cumulative order fused")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("-o,--output", opt.output, "The file --apply writes (moesim simulate SCENARIO --graph FILE runs it)");
  return cmd;
}

namespace {

std::string join_ops(const FusionCandidate& c) {
  std::string s;
  for (const std::string& o : c.ops) s += (s.empty() ? "" : " + ") + o;
  return s;
}

std::string rule_name(FusionRule r) { return r == FusionRule::matmul_epilogue ? "epilogue" : "chain"; }

std::string phases_of(const FusionCandidate& c) {
  std::string s;
  for (Phase p : c.phases) s += (s.empty() ? "" : ",") + std::string(enum_name(p));
  return s;
}

std::string bytes(double b) { return format_quantity(b, Dimension::bytes); }

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.3f ms", s * 1e3);
  return buf;
}

std::string signed_bytes(double b) { return (b < 0 ? "-" : "+") + format_quantity(b < 0 ? -b : b, Dimension::bytes); }

std::string fusion_text(const FusionAnalysis& a, const std::vector<KnownFusion>& known, int64_t top, bool distinct) {
  std::ostringstream out;
  char line[512];
  out << a.scenario << ": fusion candidates of the step graph\n";
  std::snprintf(line, sizeof line, "  baseline          step %.6f s, peak HBM %s (largest over ranks)\n", a.baseline_step_s,
                bytes(a.baseline_peak_hbm_bytes).c_str());
  out << line;
  out << "  candidates        " << a.candidates.size() << " found; " << a.simulations << " simulations ("
      << (distinct ? "one rank per class" : "every rank") << ", routing sample 0)\n";
  out << "  per rank: occurrences, kernel launches and HBM bytes (intermediates' write + read) saved, the\n"
         "  busiest pipeline stage; kept-for-backward activation memory saved is 0 by rule\n\n";
  out << "   #  rule      phases              occ  launches   HBM saved   step alone       peak alone  ops\n";
  int64_t shown = 0;
  for (const FusionGain& g : a.gains) {
    if (shown >= top) break;
    const FusionCandidate& c = a.candidates[static_cast<size_t>(g.candidate)];
    std::snprintf(line, sizeof line, "  %2lld  %-8s  %-18s %5lld  %8lld  %10s  %11s  %15s  %s\n",
                  static_cast<long long>(++shown), rule_name(c.rule).c_str(), phases_of(c).c_str(),
                  static_cast<long long>(c.occurrences_per_rank), static_cast<long long>(c.launches_saved_per_rank),
                  bytes(c.hbm_bytes_saved_per_rank).c_str(), ms(g.step_delta_s).c_str(),
                  signed_bytes(g.peak_delta_bytes).c_str(), join_ops(c).c_str());
    out << line;
  }
  if (static_cast<int64_t>(a.gains.size()) > top) out << "  ... " << a.gains.size() - static_cast<size_t>(top) << " more (--top)\n";
  if (!a.cumulative.empty()) {
    out << "\n  cumulative (" << (a.greedy ? "greedy: each step adds the candidate that shortens the step most" : "in the order above")
        << ")\n";
    out << "   #  step (s)     vs baseline     peak HBM        ops\n";
    int n = 0;
    for (const FusionCumulative& c : a.cumulative) {
      std::snprintf(line, sizeof line, "  %2d  %.6f  %12s  %14s  %s\n", ++n, c.step_time_s,
                    ms(c.step_time_s - a.baseline_step_s).c_str(), bytes(c.peak_hbm_bytes).c_str(),
                    join_ops(a.candidates[static_cast<size_t>(c.candidate)]).c_str());
      out << line;
    }
  }
  if (shown > 0) {
    out << "\n  constraints\n";
    shown = 0;
    for (const FusionGain& g : a.gains) {
      if (shown >= top) break;
      const FusionCandidate& c = a.candidates[static_cast<size_t>(g.candidate)];
      out << "  " << ++shown << ". " << join_ops(c) << "\n";
      for (const std::string& s : c.constraints) out << "       - " << s << "\n";
      out << "       - intermediates not kept for backward; largest " << bytes(c.transient_bytes_avoided)
          << " no longer allocated\n";
    }
  }
  out << "\n  known fusions: kernels of their own, as scenario switches (" << known.size()
      << " that this scenario leaves off and its model can use)\n";
  if (!known.empty()) {
    out << "     switch                                       launches   HBM saved   kept saved   step             peak\n";
    for (const KnownFusion& k : known) {
      const std::string sw = k.field + " " + k.value;
      if (!k.not_simulated.empty()) {
        out << "     " << sw << "  not simulated: " << k.not_simulated << "\n";
        continue;
      }
      std::snprintf(line, sizeof line, "     %-43s  %8lld  %10s  %11s  %15s  %15s\n", sw.c_str(),
                    static_cast<long long>(k.launches_saved_per_rank), signed_bytes(k.hbm_bytes_saved_per_rank).c_str(),
                    signed_bytes(k.kept_activation_bytes_saved).c_str(), ms(k.step_delta_s).c_str(),
                    signed_bytes(k.peak_delta_bytes).c_str());
      out << line;
    }
    for (const KnownFusion& k : known) {
      out << "     " << k.field << ": " << k.what << "\n";
      for (const std::string& c : k.constraints) out << "       - " << c << "\n";
    }
  }
  return out.str();
}

nlohmann::json known_json(const std::vector<KnownFusion>& known) {
  nlohmann::json out = nlohmann::json::array();
  for (const KnownFusion& k : known) {
    out.push_back({{"field", k.field},
                   {"value", nlohmann::json::parse(k.value)},
                   {"what", k.what},
                   {"launches_saved_per_rank", k.launches_saved_per_rank},
                   {"hbm_bytes_saved_per_rank", k.hbm_bytes_saved_per_rank},
                   {"kept_activation_bytes_saved", k.kept_activation_bytes_saved},
                   {"step_time_s", k.step_time_s},
                   {"step_delta_s", k.step_delta_s},
                   {"peak_hbm_bytes", k.peak_hbm_bytes},
                   {"peak_delta_bytes", k.peak_delta_bytes},
                   {"constraints", k.constraints},
                   {"not_simulated", k.not_simulated}});
  }
  return out;
}

nlohmann::json candidate_json(const FusionCandidate& c) {
  nlohmann::json j;
  j["rule"] = rule_name(c.rule);
  j["ops"] = c.ops;
  std::vector<std::string> kinds, phases;
  for (OpKind k : c.kinds) kinds.emplace_back(enum_name(k));
  for (Phase p : c.phases) phases.emplace_back(enum_name(p));
  j["kinds"] = kinds;
  j["phases"] = phases;
  j["occurrences_per_rank"] = c.occurrences_per_rank;
  j["launches_saved_per_rank"] = c.launches_saved_per_rank;
  j["hbm_bytes_saved_per_rank"] = c.hbm_bytes_saved_per_rank;
  j["hbm_bytes_saved_all_ranks"] = c.hbm_bytes_saved_all_ranks;
  j["transient_bytes_avoided"] = c.transient_bytes_avoided;
  j["kept_activation_bytes_saved"] = c.kept_activation_bytes_saved;
  j["constraints"] = c.constraints;
  return j;
}

std::string fusion_json(const FusionAnalysis& a, const std::vector<KnownFusion>& known, bool distinct) {
  nlohmann::json j;
  j["scenario"] = a.scenario;
  j["baseline_step_s"] = a.baseline_step_s;
  j["baseline_peak_hbm_bytes"] = a.baseline_peak_hbm_bytes;
  j["simulations"] = a.simulations;
  j["distinct_ranks"] = distinct;
  nlohmann::json cands = nlohmann::json::array();
  for (const FusionGain& g : a.gains) {
    nlohmann::json c = candidate_json(a.candidates[static_cast<size_t>(g.candidate)]);
    c["step_time_s"] = g.step_time_s;
    c["step_delta_s"] = g.step_delta_s;
    c["peak_hbm_bytes"] = g.peak_hbm_bytes;
    c["peak_delta_bytes"] = g.peak_delta_bytes;
    cands.push_back(c);
  }
  j["candidates"] = cands;  // best (most negative step_delta_s) first
  nlohmann::json cum = nlohmann::json::array();
  for (const FusionCumulative& c : a.cumulative) {
    cum.push_back({{"ops", a.candidates[static_cast<size_t>(c.candidate)].ops},
                   {"rule", rule_name(a.candidates[static_cast<size_t>(c.candidate)].rule)},
                   {"step_time_s", c.step_time_s},
                   {"step_delta_s", c.step_time_s - a.baseline_step_s},
                   {"peak_hbm_bytes", c.peak_hbm_bytes}});
  }
  j["cumulative"] = cum;
  j["cumulative_order"] = a.greedy ? "greedy" : "rank";
  j["known_fusions"] = known_json(known);  // best (most negative step_delta_s) first
  return j.dump(2) + "\n";
}

}  // namespace

std::string run_fusion_command(const FusionCliOptions& opt) {
  if (opt.apply > 0 && opt.output.empty()) throw InputError("--apply", "", "needs --output FILE");
  if (opt.apply > opt.top) throw InputError("--apply", "", "is more than --top (the cumulative order holds --top candidates)");
  const std::string ref = opt.scenario.empty() ? std::string(kDefaultScenario) : opt.scenario;
  const InputText input = read_input(ref, "scenarios", "SCENARIO");
  const Scenario s = load_scenario(input);
  const StepGraph graph = build_step_graph(s);
  const CostModel cost(s.hardware);
  FusionAnalysisOptions fo;
  fo.top = opt.top;
  fo.greedy = !opt.rank_order;
  fo.engine.distinct_ranks = opt.distinct_ranks;
  fo.engine.rank_speed = rank_speeds(s.spec);
  fo.engine.rank_compute_slowdown = rank_compute_slowdowns(s);
  const FusionAnalysis a = analyse_fusions(graph, cost, fo);
  const std::vector<KnownFusion> known =
      known_fusions(input, s, graph, a.baseline_step_s, a.baseline_peak_hbm_bytes, fo.engine);
  if (opt.apply > 0) {
    if (static_cast<size_t>(opt.apply) > a.cumulative.size()) {
      throw InputError("--apply", "", "is more than the " + std::to_string(a.cumulative.size()) + " candidates found");
    }
    std::vector<FusionChain> chains;
    for (size_t k = 0; k < static_cast<size_t>(opt.apply); ++k) {
      const auto& cc = a.candidates[static_cast<size_t>(a.cumulative[k].candidate)].chains;
      chains.insert(chains.end(), cc.begin(), cc.end());
    }
    write_file_atomically(opt.output, export_graph_json(apply_fusions(graph, chains)), "--output");
  }
  return opt.json ? fusion_json(a, known, opt.distinct_ranks) : fusion_text(a, known, opt.top, opt.distinct_ranks);
}

}  // namespace moesim
