// SPDX-License-Identifier: MIT
// libFuzzer target for moesim's input loaders (issue 21): any bytes given to a loader must give a
// value or an InputError - never a crash, a sanitizer report, a hang or another exception.
// MOESIM_FUZZ_LOADER picks the loader: 1 model, 2 hardware, 3 scenario, 4 calibration, 5 graph,
// 6 profiler trace (plain or gzip).
// Built and run by tests/fuzz/run.sh (clang++-14, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "cost/calibration.hpp"
#include "graph/graph_json.hpp"
#include "hardware/hardware_spec.hpp"
#include "model/model_spec.hpp"
#include "scenario/scenario_spec.hpp"
#include "trace/kineto_trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moesim;
  // A scenario names its model and hardware; fuzzed scenarios read shipped ones (embedded).
  const InputText input{"fuzz.json", std::string(reinterpret_cast<const char*>(data), size), true};
  try {
#if MOESIM_FUZZ_LOADER == 1
    (void)load_model(input);
#elif MOESIM_FUZZ_LOADER == 2
    (void)load_hardware(input);
#elif MOESIM_FUZZ_LOADER == 3
    (void)load_scenario(input);
#elif MOESIM_FUZZ_LOADER == 4
    (void)load_calibration(input);
#elif MOESIM_FUZZ_LOADER == 5
    (void)import_graph_json(input.text, input.name);
#else
    const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    (void)parse_kineto_trace(gz ? gunzip(input.text, input.name) : input.text, input.name);
#endif
  } catch (const InputError&) {
  }
  return 0;  // any other exception escapes: libFuzzer reports it as a crash
}
