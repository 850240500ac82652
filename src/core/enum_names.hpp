// SPDX-License-Identifier: MIT
// One name table per input enum, shared by parsing, describe and output.
//
// Specialise EnumNames<E> with a constexpr array `names` of {name, value} pairs; the input reader
// then accepts exactly those names and `describe` lists them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace moesim {

template <class E>
struct EnumNames;  // specialise: static constexpr std::array<std::pair<std::string_view, E>, N> names

template <class E>
std::string_view enum_name(E value) {
  for (const auto& [name, v] : EnumNames<E>::names) {
    if (v == value) return name;
  }
  return "?";
}

template <class E>
std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& [n, v] : EnumNames<E>::names) {
    if (n == name) return v;
  }
  return std::nullopt;
}

// "a | b | c", for messages and docs.
template <class E>
std::string enum_choices() {
  std::string out;
  for (const auto& [n, v] : EnumNames<E>::names) {
    if (!out.empty()) out += " | ";
    out += n;
  }
  return out;
}

}  // namespace moesim
