// SPDX-License-Identifier: MIT
// `moesim calibrate [--out FILE] [--quick]` (built with CUDA only): runs the backend's
// micro-benchmarks on the local GPUs and writes a calibration file (docs/calibration/format.md).
#pragma once

#include <string>

namespace moesim {

struct CalibrateCommand {
  std::string out;      // empty: the JSON goes to stdout and the summary to stderr
  bool quick = false;
  std::string command;  // the command line, recorded as provenance
};

// Returns the text to print on stdout.
std::string run_calibrate_command(const CalibrateCommand& c);

}  // namespace moesim
