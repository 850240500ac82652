// SPDX-License-Identifier: MIT
#include "core/allocator.hpp"

#include <cstdlib>  // defines __GLIBC__ on glibc (through features.h)
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace moesim {

void tune_allocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

}  // namespace moesim
