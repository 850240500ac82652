// SPDX-License-Identifier: MIT
// `moesim calibrate --from-trace TRACE --scenario SCENARIO [--out FILE]` and
// `moesim validate --from-trace TRACE --scenario SCENARIO [--calibration FILE] [--json]`: a PyTorch
// profiler trace of the user's own training step, matched against the scenario's op graph
// (src/trace/), fitted into a calibration file, or compared with the simulator. CPU only: these
// forms never load the GPU module. docs/calibration/from-trace.md is the recipe.
#pragma once

#include <string>
#include <vector>

namespace moesim {

struct TraceCommand {
  std::vector<std::string> traces;     // --from-trace, repeatable (calibrate); one for validate
  std::vector<std::string> scenarios;  // --scenario, one per trace (or one for all)
  std::string out;                     // calibrate: the calibration file (empty: stdout)
  std::string calibration;             // validate: a calibration file instead of the hardware's
  std::string hardware;                // --hardware: in place of the scenario's hardware file
  bool json = false;
  std::string command;                 // the command line, for provenance
};

// Return the text to print on stdout; bad input throws InputError.
std::string run_calibrate_from_trace(const TraceCommand& c);
std::string run_validate_from_trace(const TraceCommand& c);

}  // namespace moesim
