// SPDX-License-Identifier: MIT
// The model's error band on a hardware file: how far its step-time predictions were from
// measurements there, read from the validation records the binary embeds
// (hardware/validation/error-bands.json: the executor validations of
// docs/calibration/validation.md and the published runs of docs/validation/published.md).
//
// An error is predicted / measured - 1. The band is the range of the records' step-time errors
// (and per op family, where a record has them). Two plans of one sweep are a tie when their step
// times differ by less than `tie_fraction`: the largest spread (max - min error) between runs of
// one model on that hardware - how far apart the model's errors fell on plans of one model, which
// is what a comparison of plans rests on - or, with no model run twice, the band's width.
// Hardware with no record is unvalidated: no band and no ties.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moesim {

struct ErrorRange {
  double low = 0;   // the most negative error (a prediction too fast)
  double high = 0;  // the most positive
  int64_t num_runs = 0;
};

struct ErrorBand {
  bool validated = false;
  std::string hardware;  // the name it was looked up by
  std::string basis;     // what the records are
  std::string source;    // where they are documented
  ErrorRange step;
  std::vector<std::pair<std::string, ErrorRange>> families;  // op family -> range, in name order
  double tie_fraction = 0;                                   // see above; 0 when unvalidated
};

// The band of the hardware named `hardware_name` (HardwareSpec::name) in the embedded records.
ErrorBand error_band_for(std::string_view hardware_name);
// The same from a records file's text (`file` names it in errors); for tests.
ErrorBand error_band_from(std::string_view records_json, const std::string& file, std::string_view hardware_name);

// Whether a plan of step time `step_s` ties with the best plan's `best_s` under `band`.
bool within_band(const ErrorBand& band, double best_s, double step_s);

// "step -2.6% .. -0.4% over 6 runs (...); ties within 2.2%" or "unvalidated (...)": one line.
std::string error_band_line(const ErrorBand& band);

}  // namespace moesim
