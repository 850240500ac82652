// SPDX-License-Identifier: MIT
#include "search/sweep_report.hpp"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "report/error_band.hpp"

namespace moesim {
namespace {

using Json = nlohmann::ordered_json;

// Shortest text that reads back as the same double, the same on every run.
std::string number(double v) { return Json(v).dump(); }

std::string grouped(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string display_value(const std::string& json_text) {
  const Json v = Json::parse(json_text);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

const char* status_name(ConfigStatus s) {
  switch (s) {
    case ConfigStatus::rejected:
      return "rejected";
    case ConfigStatus::pruned:
      return "pruned";
    case ConfigStatus::simulated:
      return "simulated";
  }
  return "";
}

Json config_json(const SweepSpace& space, int64_t index) {
  Json c = Json::object();
  for (const auto& [path, value] : space.config(index)) c[path] = Json::parse(value);
  return c;
}

// The step time plans are compared with for ties: the best plan's, when it fits (0: none).
double best_fitting_s(const SweepSummary& s) {
  return !s.results().empty() && s.results().front().fits ? s.results().front().step_time_s : 0.0;
}

bool is_tie(const ErrorBand& band, double best_s, const RankedPoint& p) {
  return p.fits && within_band(band, best_s, p.step_time_s);
}

Json point_json(const SweepSpace& space, const RankedPoint& p, const ErrorBand& band, double best_s) {
  Json j;
  j["config_index"] = p.index;
  j["config"] = config_json(space, p.index);
  j["step_time_s"] = p.step_time_s;
  j["step_time_p99_s"] = p.step_time_p99_s;
  j["tokens_per_s"] = p.tokens_per_s;
  j["mfu"] = p.mfu;
  j["peak_hbm_bytes"] = p.peak_hbm_bytes;
  j["peak_ddr_bytes"] = p.peak_ddr_bytes;
  j["memory_bound_bytes"] = p.memory_bound_bytes;
  j["tokens_per_s_per_device"] = p.tokens_per_s / static_cast<double>(p.num_devices);
  j["compute_s"] = p.compute_s;
  j["exposed_comm_s"] = p.exposed_comm_s;
  j["bubble_s"] = p.bubble_s;
  j["fits"] = p.fits;
  j["tie_with_best"] = is_tie(band, best_s, p);
  return j;
}

void point_table(std::ostringstream& out, const SweepSpace& space, const std::vector<RankedPoint>& points,
                 const ErrorBand& band, double best_s) {
  char line[256];
  std::snprintf(line, sizeof line, "  %6s %8s %3s %9s %7s %8s %8s %9s %8s %4s  %s\n", "config", "step s", "tie",
                "tok/s/dev", "MFU", "HBM GB", "DDR GB", "exposed s", "bubble s", "fits", "settings");
  out << line;
  for (const RankedPoint& p : points) {
    std::snprintf(line, sizeof line, "  %6lld %8.3f %3s %9.4g %6.1f%% %8.1f %8.1f %9.3f %8.3f %4s  ",
                  static_cast<long long>(p.index), p.step_time_s, is_tie(band, best_s, p) ? "=" : "",
                  p.tokens_per_s / static_cast<double>(p.num_devices), 100.0 * p.mfu, p.peak_hbm_bytes / 1e9,
                  p.peak_ddr_bytes / 1e9, p.exposed_comm_s, p.bubble_s, p.fits ? "yes" : "no");
    out << line << config_text(space, p.index) << "\n";
  }
}

}  // namespace

std::string axis_short_name(const std::string& path) {
  std::string s = path.starts_with("/") ? path.substr(1) : path;
  if (s.starts_with("parallel/")) s = s.substr(9);
  for (char& c : s) {
    if (c == '/') c = '.';
  }
  return s;
}

std::string config_text(const SweepSpace& space, int64_t index) {
  std::string out;
  for (const auto& [path, value] : space.config(index)) {
    if (!out.empty()) out += ' ';
    out += axis_short_name(path) + "=" + display_value(value);
  }
  return out.empty() ? "(the scenario as written)" : out;
}

std::string sweep_report_text(const SweepSpace& space, const SweepSummary& s, const SweepRunInfo& info) {
  std::ostringstream out;
  const Scenario& base = space.base();
  out << base.spec.name << ": " << base.model.name << " on " << base.hardware.name << ", " << space.num_axes()
      << " axes, " << grouped(s.num_configs_total) << " configurations\n";
  out << "  rejected   " << grouped(s.num_configs_rejected) << " (impossible plans; by the field the checker named:";
  for (const auto& [path, n] : s.rejected_by_path) out << " " << path << " " << grouped(n);
  out << ")\n";
  out << "  pruned     " << grouped(s.num_configs_pruned) << " (persistent state alone exceeds HBM; not simulated)\n";
  out << "  simulated  " << grouped(s.num_configs_simulated) << " (" << grouped(s.num_configs_fit) << " fit), "
      << base.spec.routing.num_sampled_steps << " sampled step(s) each unless an axis changes it\n";
  char line[256];
  const double per_min = info.wall_s > 0 ? 60.0 * static_cast<double>(s.num_configs_total) / info.wall_s : 0.0;
  std::snprintf(line, sizeof line, "wall         %.1f s, %.0f configurations/min, %lld thread(s) x %lld process(es)\n",
                info.wall_s, per_min, static_cast<long long>(info.threads), static_cast<long long>(info.processes));
  out << line;
  const ErrorBand band = error_band_for(base.hardware.name);
  const double best_s = best_fitting_s(s);
  out << "error band   " << error_band_line(band) << "\n";
  out << "\nbest " << s.results().size() << " by step time (configurations that fit first; tie '=': within the "
      << "error band of the best):\n";
  point_table(out, space, s.results(), band, best_s);
  out << "\nPareto front, step time against peak HBM (configurations that fit):\n";
  point_table(out, space, s.pareto(), band, best_s);
  if (!s.rejected.empty()) {
    out << "\nfirst " << s.rejected.size() << " rejected:\n";
    for (const ConfigOutcome& o : s.rejected)
      out << "  " << o.index << " " << config_text(space, o.index) << "\n      " << o.reason << "\n";
  }
  if (!s.pruned.empty()) {
    out << "\nfirst " << s.pruned.size() << " pruned:\n";
    for (const ConfigOutcome& o : s.pruned)
      out << "  " << o.index << " " << config_text(space, o.index) << "\n      " << o.reason << "\n";
  }
  return out.str();
}

std::string sweep_report_json(const SweepSpace& space, const SweepSummary& s, const SweepRunInfo& info) {
  Json j;
  const Scenario& base = space.base();
  j["scenario"] = base.spec.name;
  j["model"] = base.model.name;
  j["hardware"] = base.hardware.name;
  j["hbm_capacity_bytes"] = base.hardware.device.hbm_capacity.value;
  Json axes = Json::array();
  for (int64_t a = 0; a < space.num_axes(); ++a) {
    Json axis;
    axis["path"] = space.axis(a).path;
    axis["num_values"] = space.axis(a).values.size();
    axes.push_back(axis);
  }
  j["axes"] = axes;
  j["num_configs_total"] = s.num_configs_total;
  j["num_configs_rejected"] = s.num_configs_rejected;
  j["num_configs_pruned"] = s.num_configs_pruned;
  j["num_configs_simulated"] = s.num_configs_simulated;
  j["num_configs_fit"] = s.num_configs_fit;
  j["wall_s"] = info.wall_s;  // the only run-dependent key: threads and processes change nothing else
  const ErrorBand band = error_band_for(base.hardware.name);
  const double best_s = best_fitting_s(s);
  Json band_json;
  band_json["validated"] = band.validated;
  band_json["hardware"] = band.hardware;
  band_json["summary"] = error_band_line(band);
  if (band.validated) {
    band_json["step_low"] = band.step.low;
    band_json["step_high"] = band.step.high;
    band_json["tie_fraction"] = band.tie_fraction;
  }
  j["error_band"] = band_json;
  Json results = Json::array();
  for (const RankedPoint& p : s.results()) results.push_back(point_json(space, p, band, best_s));
  j["results"] = results;
  Json pareto = Json::array();
  for (const RankedPoint& p : s.pareto()) pareto.push_back(point_json(space, p, band, best_s));
  j["pareto"] = pareto;
  Json by_path = Json::object();
  for (const auto& [path, n] : s.rejected_by_path) by_path[path] = n;
  j["rejected_by_path"] = by_path;
  auto listed = [&](const std::vector<ConfigOutcome>& v) {
    Json a = Json::array();
    for (const ConfigOutcome& o : v) {
      Json e;
      e["config_index"] = o.index;
      e["config"] = config_json(space, o.index);
      e["reason"] = o.reason;
      if (o.status == ConfigStatus::pruned) e["memory_bound_bytes"] = o.memory_bound_bytes;
      a.push_back(e);
    }
    return a;
  };
  j["rejected"] = listed(s.rejected);
  j["pruned"] = listed(s.pruned);
  return j.dump(2) + "\n";
}

std::string sweep_csv_header(const SweepSpace& space) {
  std::string out = "config_index";
  for (int64_t a = 0; a < space.num_axes(); ++a) {
    out += ',';
    out += csv_field(space.axis(a).path);
  }
  return out +
         ",status,step_time_s,step_time_p99_s,tokens_per_s,mfu,peak_hbm_bytes,peak_ddr_bytes,memory_bound_bytes,"
         "tokens_per_s_per_device,compute_s,exposed_comm_s,bubble_s,fits,error_band_tie_fraction,reason\n";
}

std::string sweep_csv_row(const SweepSpace& space, const ConfigOutcome& o) {
  std::string out = std::to_string(o.index);
  for (const auto& [path, value] : space.config(o.index)) {
    out += ',';
    out += csv_field(value);
  }
  out += ",";
  out += status_name(o.status);
  if (o.status == ConfigStatus::simulated) {
    for (double v : {o.step_time_s, o.step_time_p99_s, o.tokens_per_s, o.mfu, o.peak_hbm_bytes, o.peak_ddr_bytes,
                     o.memory_bound_bytes, o.tokens_per_s / static_cast<double>(o.num_devices), o.compute_s,
                     o.exposed_comm_s, o.bubble_s}) {
      out += ',';
      out += number(v);
    }
    out += o.fits ? ",true" : ",false";
  } else if (o.status == ConfigStatus::pruned) {
    out += ",,,,,,,";
    out += number(o.memory_bound_bytes);
    out += ",,,,,false";
  } else {
    out += ",,,,,,,,,,,,false";
  }
  // Rows stream out before the best plan is known: a row ties with the best when its step time is
  // within this fraction of the best fitting row's (empty: unvalidated hardware).
  const ErrorBand band = error_band_for(space.base().hardware.name);
  out += ',';
  if (band.validated) out += number(band.tie_fraction);
  out += ',';
  out += csv_field(o.reason);
  out += '\n';
  return out;
}

}  // namespace moesim
