// SPDX-License-Identifier: MIT
// `moesim slice SCENARIO [--layers N] [--devices N] [--hardware H] -o FILE`: a 1-2 layer slice of
// a scenario's model at its plan's per-rank shapes (scenario/slice.hpp), written as a scenario
// FILE and a model file beside it, for `moesim validate` and `simulate`.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace moesim {

struct SliceCliOptions {
  std::string scenario;
  std::string hardware;  // empty: the source scenario's hardware
  std::string output;
  int64_t num_layers = 2;
  int64_t num_devices = 1;
};

CLI::App* add_slice_command(CLI::App& app, SliceCliOptions& options);
// Writes the files; returns the text to print.
std::string run_slice_command(const SliceCliOptions& options);

}  // namespace moesim
