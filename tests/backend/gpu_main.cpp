// SPDX-License-Identifier: MIT
// doctest main for tests that need a GPU: without a CUDA device they exit 77, which meson reports
// as SKIP, so CI machines without a GPU build and skip them; the GPU machine runs them.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "backend/cuda/device.hpp"

int main(int argc, char** argv) {
  if (moesim::cuda::device_count() == 0) {
    std::puts("no CUDA device: skipped");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
