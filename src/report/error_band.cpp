// SPDX-License-Identifier: MIT
#include "report/error_band.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/embedded.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"

namespace moesim {
namespace {

constexpr const char* kRecordsPath = "hardware/validation/error-bands.json";

void widen(ErrorRange& r, double e) {
  r.low = r.num_runs == 0 ? e : std::min(r.low, e);
  r.high = r.num_runs == 0 ? e : std::max(r.high, e);
  ++r.num_runs;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * fraction);
  return buf;
}

}  // namespace

ErrorBand error_band_from(std::string_view records_json, const std::string& file, std::string_view hardware_name) {
  const nlohmann::json root = parse_json(InputText{file, std::string(records_json), true});
  ErrorBand band;
  band.hardware = std::string(hardware_name);
  if (root.value("format", std::string()) != "moesim-error-bands") throw InputError(file, "/format", "must be \"moesim-error-bands\"");
  const nlohmann::json& entries = root.at("hardware");
  for (size_t i = 0; i < entries.size(); ++i) {
    const nlohmann::json& e = entries[i];
    const auto& names = e.at("names");
    if (std::find(names.begin(), names.end(), band.hardware) == names.end()) continue;
    band.validated = true;
    band.basis = e.at("basis").get<std::string>();
    band.source = e.at("source").get<std::string>();
    std::map<std::string, ErrorRange> by_model;
    std::map<std::string, ErrorRange> by_family;
    for (const nlohmann::json& run : e.at("runs")) {
      const double step = run.at("step").get<double>();
      widen(band.step, step);
      widen(by_model[run.at("model").get<std::string>()], step);
      if (run.contains("families")) {
        for (const auto& [family, err] : run["families"].items()) widen(by_family[family], err.get<double>());
      }
    }
    if (band.step.num_runs == 0) throw InputError(file, "/hardware/" + std::to_string(i) + "/runs", "has no run");
    for (const auto& [model, r] : by_model) {
      if (r.num_runs >= 2) band.tie_fraction = std::max(band.tie_fraction, r.high - r.low);
    }
    if (band.tie_fraction == 0) band.tie_fraction = band.step.high - band.step.low;
    band.families.assign(by_family.begin(), by_family.end());
    break;
  }
  return band;
}

ErrorBand error_band_for(std::string_view hardware_name) {
  // Read once per hardware name: a sweep asks for every configuration, from several threads.
  static std::mutex mutex;
  static std::map<std::string, ErrorBand, std::less<>> bands;
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = bands.find(hardware_name); it != bands.end()) return it->second;
  const auto text = find_embedded(kRecordsPath);
  if (!text) throw std::logic_error(std::string(kRecordsPath) + " is not embedded");
  return bands.emplace(std::string(hardware_name), error_band_from(*text, kRecordsPath, hardware_name)).first->second;
}

bool within_band(const ErrorBand& band, double best_s, double step_s) {
  return band.validated && best_s > 0 && std::abs(step_s - best_s) <= band.tie_fraction * best_s;
}

std::string error_band_line(const ErrorBand& band) {
  if (!band.validated) {
    return "unvalidated: no validation record for hardware '" + band.hardware +
           "' (docs/calibration/guide.md says how to calibrate and validate one)";
  }
  char ties[64];
  std::snprintf(ties, sizeof ties, "; plans within %.1f%% of each other are ties", 100.0 * band.tie_fraction);
  return "step time " + percent(band.step.low) + " .. " + percent(band.step.high) + " over " +
         std::to_string(band.step.num_runs) + " run(s), " + band.basis + " (" + band.source + ")" + ties;
}

}  // namespace moesim
