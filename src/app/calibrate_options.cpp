// SPDX-License-Identifier: MIT
// The checks of `moesim calibrate`'s options, in every build (calibrate_command.hpp).
#include <algorithm>
#include <optional>

#include "app/calibrate_command.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

void check_calibrate_command(CalibrateCommand& c, const std::string& only_text, std::optional<int64_t> devices) {
  if (devices && (*devices < 1 || *devices > 4096)) {
    throw InputError("--devices", "", "must be a number of GPUs from 1 to 4096, got " + std::to_string(*devices));
  }
  c.num_devices = devices.value_or(0);
  c.only.clear();
  if (!only_text.empty()) {
    std::string known;
    for (const std::string& f : kCalibrationFamilies) known += (known.empty() ? "" : ", ") + f;
    size_t start = 0;
    for (;;) {
      const size_t comma = only_text.find(',', start);
      const std::string family = only_text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (std::find(kCalibrationFamilies.begin(), kCalibrationFamilies.end(), family) == kCalibrationFamilies.end()) {
        throw InputError("--only", "", "'" + family + "' is not a calibration family (one of: " + known + ")");
      }
      if (std::find(c.only.begin(), c.only.end(), family) == c.only.end()) c.only.push_back(family);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (!(c.gemm_duty > 0 && c.gemm_duty <= 1)) {
    throw InputError("--gemm-duty", "", "must be in (0, 1]: the fraction of the GEMM sweep the GPU is busy (1: back to back)");
  }
  if (!c.attention_scenario.empty()) {
    const bool attention = c.only.empty() || std::find(c.only.begin(), c.only.end(), "attention") != c.only.end();
    if (!attention) throw InputError("--scenario", "", "times attention ops: give it with --only attention (or no --only)");
    (void)load_scenario(read_input(c.attention_scenario, "scenarios", "--scenario"));
  }
}

}  // namespace moesim
