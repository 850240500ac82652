// SPDX-License-Identifier: MIT
// libFuzzer entry point for one target of targets.hpp, named at compile time by MOESIM_FUZZ_TARGET
// ("scenario", "simulate", ...). Built and run by tests/fuzz/run.sh (clang++-14,
// -fsanitize=fuzzer,address,undefined). An exception other than InputError escapes: libFuzzer
// reports it as a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::run_target(MOESIM_FUZZ_TARGET, std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
