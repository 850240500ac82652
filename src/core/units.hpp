// SPDX-License-Identifier: MIT
// Physical quantities read from input files ("900 GB/s", "141 GiB", "1.5 us", "989 TFLOP/s", "700 W").
//
// A quantity is parsed once, at load time, into SI base units (bytes, bytes/s, seconds, FLOP,
// FLOP/s, watts) held as a double inside a type that names the dimension, so a bandwidth can never be
// passed where a capacity is expected. Prefixes: K M G T P are decimal (1e3...), Ki Mi Gi Ti Pi
// binary. 'B' is a byte and 'b' a bit ("400 Gb/s" = 50e9 bytes/s). Units are case-sensitive and
// mandatory: a bare number is an error, because the unit of a bare number is a guess.
#pragma once

#include <string>
#include <string_view>

namespace moesim {

enum class Dimension { bytes, bytes_per_s, seconds, flops, flops_per_s, watts };

template <Dimension D>
struct Quantity {
  double value = 0.0;  // in SI base units of D

  friend constexpr bool operator==(Quantity, Quantity) = default;
  friend constexpr auto operator<=>(Quantity, Quantity) = default;
};

using Bytes = Quantity<Dimension::bytes>;
using BytesPerSecond = Quantity<Dimension::bytes_per_s>;
using Seconds = Quantity<Dimension::seconds>;
using Flops = Quantity<Dimension::flops>;
using FlopsPerSecond = Quantity<Dimension::flops_per_s>;
using Watts = Quantity<Dimension::watts>;

// The name of a dimension for messages and docs ("bytes/s").
std::string_view dimension_name(Dimension d);
// The units accepted for a dimension, for messages and docs ("B/s, KB/s, ..., Gb/s, ...").
std::string accepted_units(Dimension d);

// Parses "<number> <unit>" (space optional) into base units; throws ValueError with a message
// that names the accepted units.
double parse_quantity(std::string_view text, Dimension d);

template <Dimension D>
Quantity<D> parse(std::string_view text) {
  return Quantity<D>{parse_quantity(text, D)};
}

// Human formatting with a decimal prefix and 4 significant digits: "141 GB", "4.8 TB/s".
std::string format_quantity(double value, Dimension d);
template <Dimension D>
std::string format(Quantity<D> q) {
  return format_quantity(q.value, D);
}
// Binary-prefixed bytes: "1.5 GiB".
std::string format_bytes_binary(double bytes);

}  // namespace moesim
