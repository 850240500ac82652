// SPDX-License-Identifier: MIT
#include "app/progress.hpp"

#include <cstdio>
#include <string>

#include <unistd.h>

namespace moesim {

bool progress_wanted(bool json) {
  return ::isatty(STDERR_FILENO) != 0 && !(json && ::isatty(STDOUT_FILENO) == 0);
}

void draw_progress(int64_t done, int64_t total, std::string_view unit, std::chrono::steady_clock::time_point start) {
  constexpr int kWidth = 40;
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The estimate assumes the rest goes at the average rate so far (a sweep's rejected
  // configurations are cheap and spread over the space, so it wanders a little).
  char eta[32] = "";
  if (done > 0 && done < total) {
    std::snprintf(eta, sizeof eta, ", ~%.0f s left", s * static_cast<double>(total - done) / static_cast<double>(done));
  }
  std::fprintf(stderr, "\r[%s] %lld / %lld %.*s, %.0f s%s   ", bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total), static_cast<int>(unit.size()), unit.data(), s, eta);
  std::fflush(stderr);
}

void draw_count(int64_t done, std::string_view unit, std::chrono::steady_clock::time_point start) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "\r%lld %.*s, %.0f s   ", static_cast<long long>(done), static_cast<int>(unit.size()), unit.data(), s);
  std::fflush(stderr);
}

void end_progress() { std::fprintf(stderr, "\n"); }

}  // namespace moesim
