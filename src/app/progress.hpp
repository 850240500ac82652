// SPDX-License-Identifier: MIT
// Progress of a long command (a sweep's configurations, simulate's sampled steps) with an
// estimate of the time left: one line on stderr, redrawn in place. Shown only to someone
// watching: stderr is a terminal, and the output is not JSON going to a pipe or a file (a
// script reading it wants no noise on the terminal either).
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace moesim {

// Whether to draw progress for a command whose `--json` flag is `json`.
bool progress_wanted(bool json);

// "[=====>     ] 1,234 / 6,912 configurations, 12 s, ~55 s left", timed from `start`.
void draw_progress(int64_t done, int64_t total, std::string_view unit, std::chrono::steady_clock::time_point start);

// "12 plans evaluated, 3 s": progress of a search that stops when it has its answer, with no
// total to estimate the time left from.
void draw_count(int64_t done, std::string_view unit, std::chrono::steady_clock::time_point start);

// Ends the progress line (the next output starts on a line of its own).
void end_progress();

}  // namespace moesim
