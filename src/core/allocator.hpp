// SPDX-License-Identifier: MIT
// The C library's allocator, set for how moesim uses memory: a graph build, a sampled step and a
// sweep's configurations each allocate arrays of megabytes to tens of megabytes (a program's ops
// and tensor descriptors, a step's per-rank state), drop them and allocate them again. By default
// glibc maps every allocation above its mmap threshold (128 KiB, raised by what was last freed, up
// to 32 MiB) fresh from the kernel and unmaps it when freed, and returns freed memory at the top of
// the heap beyond 128 KiB: each new array then takes a page fault per 4 KiB page it touches, which
// on these machines cost more than the work that fills the array (docs/performance.md, "Eighth
// pass"). Kept in the heap, the pages are reused instead.
#pragma once

namespace moesim {

// Arrays up to 32 MiB (glibc's largest mmap threshold) come from the heap, and up to 64 MiB of
// freed memory stays at the top of the heap (more gained nothing measurable). Call first thing in
// main(); a no-op outside glibc.
void tune_allocator();

}  // namespace moesim
