// SPDX-License-Identifier: MIT
// Number formatting for human-readable reports.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace moesim {

// 2779.5e9 -> "2,779.5B"; 33.03e6 -> "33.03M".
inline std::string format_count(double n) {
  char buf[64];
  const double a = std::fabs(n);
  if (a >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
    std::string s = buf;
    // thousands separator for the integer part of billions
    const size_t dot = s.find('.');
    for (int i = static_cast<int>(dot) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(static_cast<size_t>(i), ",");
    return s;
  }
  if (a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  } else if (a >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.2fK", n / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", n);
  }
  return buf;
}

// 6.3e11 -> "6.300e+11".
inline std::string format_sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace moesim
