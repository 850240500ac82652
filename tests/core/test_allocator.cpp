// SPDX-License-Identifier: MIT
// core/allocator.hpp: after tune_allocator(), an array of megabytes comes from the heap (not a
// fresh mapping), and its pages stay in the process when it is freed, so the next array of that
// size reuses them.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>

#include "core/allocator.hpp"

#if defined(__GLIBC__)
#include <malloc.h>

TEST_CASE("arrays of megabytes come from the heap and stay there when freed") {
  moesim::tune_allocator();
  const size_t bytes = size_t{16} << 20;  // above glibc's default mmap threshold, below 32 MiB
  const struct mallinfo2 before = mallinfo2();
  void* a = std::malloc(bytes);
  REQUIRE(a != nullptr);
  std::memset(a, 1, bytes);
  const struct mallinfo2 during = mallinfo2();
  CHECK(during.hblkhd == before.hblkhd);  // no mapping of its own
  std::free(a);
  const struct mallinfo2 after = mallinfo2();
  CHECK(after.arena >= during.arena);  // not trimmed back to the kernel
  void* b = std::malloc(bytes);
  REQUIRE(b != nullptr);
  CHECK(mallinfo2().arena == after.arena);  // the same pages again
  std::free(b);
}
#else
TEST_CASE("tune_allocator is a no-op outside glibc") { moesim::tune_allocator(); }
#endif
