// SPDX-License-Identifier: MIT
#include "core/units.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.hpp"

namespace moesim {
namespace {

struct Prefix {
  std::string_view symbol;
  double factor;
};

constexpr std::array<Prefix, 10> kPrefixes{{
    {"", 1.0},
    {"K", 1e3},
    {"M", 1e6},
    {"G", 1e9},
    {"T", 1e12},
    {"P", 1e15},
    {"Ki", 1024.0},
    {"Mi", 1024.0 * 1024},
    {"Gi", 1024.0 * 1024 * 1024},
    {"Ti", 1024.0 * 1024 * 1024 * 1024},
}};

constexpr std::array<Prefix, 7> kDecimalPrefixes{{
    {"", 1.0}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}}};

struct Base {
  std::string_view symbol;
  double factor;  // to the dimension's SI unit
  bool binary_prefixes;
};

// The base symbols each dimension accepts after an optional prefix.
std::vector<Base> bases(Dimension d) {
  switch (d) {
    case Dimension::bytes:
      return {{"B", 1.0, true}, {"b", 0.125, true}};
    case Dimension::bytes_per_s:
      return {{"B/s", 1.0, true}, {"b/s", 0.125, true}};
    case Dimension::seconds:
      return {{"s", 1.0, false}};
    case Dimension::flops:
      return {{"FLOP", 1.0, false}};
    case Dimension::flops_per_s:
      return {{"FLOP/s", 1.0, false}};
    case Dimension::watts:
      return {{"W", 1.0, false}};
  }
  return {};
}

// Sub-second units are not decimal prefixes of the kind above (m = milli here), so time is listed.
constexpr std::array<Prefix, 6> kTimeUnits{{
    {"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"\u00b5s", 1e-6}, {"ns", 1e-9}, {"ps", 1e-12}}};

bool lookup_unit(std::string_view unit, Dimension d, double& factor) {
  if (d == Dimension::seconds) {
    for (const auto& u : kTimeUnits) {
      if (u.symbol == unit) {
        factor = u.factor;
        return true;
      }
    }
    return false;
  }
  for (const auto& base : bases(d)) {
    if (unit.size() < base.symbol.size() || !unit.ends_with(base.symbol)) continue;
    std::string_view prefix = unit.substr(0, unit.size() - base.symbol.size());
    for (const auto& p : kPrefixes) {
      if (p.symbol != prefix) continue;
      if (p.symbol.size() == 2 && !base.binary_prefixes) return false;
      factor = p.factor * base.factor;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string_view dimension_name(Dimension d) {
  switch (d) {
    case Dimension::bytes: return "bytes";
    case Dimension::bytes_per_s: return "bytes/s";
    case Dimension::seconds: return "seconds";
    case Dimension::flops: return "FLOP";
    case Dimension::flops_per_s: return "FLOP/s";
    case Dimension::watts: return "watts";
  }
  return "?";
}

std::string accepted_units(Dimension d) {
  switch (d) {
    case Dimension::bytes: return "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB (b for bits)";
    case Dimension::bytes_per_s: return "B/s, KB/s, MB/s, GB/s, TB/s, GiB/s, ... or bits: Mb/s, Gb/s, Tb/s";
    case Dimension::seconds: return "s, ms, us, ns, ps";
    case Dimension::flops: return "FLOP, KFLOP, MFLOP, GFLOP, TFLOP, PFLOP";
    case Dimension::flops_per_s: return "FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s";
    case Dimension::watts: return "W, KW";
  }
  return "";
}

double parse_quantity(std::string_view text, Dimension d) {
  const std::string expected = "expected a number and a unit (" + accepted_units(d) + ")";
  auto trimmed = text;
  while (!trimmed.empty() && trimmed.front() == ' ') trimmed.remove_prefix(1);
  while (!trimmed.empty() && trimmed.back() == ' ') trimmed.remove_suffix(1);
  double number = 0.0;
  auto [end, ec] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), number);
  if (ec != std::errc() || end == trimmed.data()) {
    throw ValueError("'" + std::string(text) + "' is not a quantity; " + expected);
  }
  if (!std::isfinite(number)) throw ValueError("'" + std::string(text) + "' is not finite");
  std::string_view unit(end, static_cast<size_t>(trimmed.data() + trimmed.size() - end));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.empty()) {
    throw ValueError("'" + std::string(text) + "' has no unit; " + expected);
  }
  double factor = 0.0;
  if (!lookup_unit(unit, d, factor)) {
    throw ValueError("'" + std::string(unit) + "' is not a unit of " + std::string(dimension_name(d)) + "; " +
                     expected);
  }
  if (!std::isfinite(number * factor)) throw ValueError("'" + std::string(text) + "' is beyond the range of a double");
  return number * factor;
}

std::string format_quantity(double value, Dimension d) {
  std::string_view suffix;
  switch (d) {
    case Dimension::bytes: suffix = "B"; break;
    case Dimension::bytes_per_s: suffix = "B/s"; break;
    case Dimension::flops: suffix = "FLOP"; break;
    case Dimension::flops_per_s: suffix = "FLOP/s"; break;
    case Dimension::watts: suffix = "W"; break;
    case Dimension::seconds: {
      const double a = std::fabs(value);
      const Prefix* unit = &kTimeUnits[0];
      for (const auto& u : kTimeUnits) {
        if (u.symbol == "\u00b5s") continue;
        unit = &u;
        if (a >= u.factor) break;
      }
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4g %s", value / unit->factor, std::string(unit->symbol).c_str());
      return buf;
    }
  }
  const double a = std::fabs(value);
  const Prefix* prefix = &kDecimalPrefixes[0];
  for (const auto& p : kDecimalPrefixes) {
    if (a >= p.factor) prefix = &p;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g %s%s", value / prefix->factor, std::string(prefix->symbol).c_str(),
                std::string(suffix).c_str());
  return buf;
}

std::string format_bytes_binary(double bytes) {
  constexpr std::array<std::string_view, 6> names{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t i = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && i + 1 < names.size()) {
    v /= 1024.0;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g %s", v, std::string(names[i]).c_str());
  return buf;
}

}  // namespace moesim
