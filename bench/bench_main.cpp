// SPDX-License-Identifier: MIT
// The benchmarks' main: Google Benchmark's, after the binary's allocator settings
// (core/allocator.hpp), so that the numbers are those of the binary.
#include <benchmark/benchmark.h>

#include "core/allocator.hpp"

int main(int argc, char** argv) {
  moesim::tune_allocator();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
