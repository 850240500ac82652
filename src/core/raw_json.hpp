// SPDX-License-Identifier: MIT
// A JSON value kept as text, for inputs whose type depends on another field (a sweep axis's values
// take the type of the field the axis names). Keeps nlohmann/json out of spec headers.
#pragma once

#include <string>

namespace moesim {

struct RawJson {
  std::string text;  // compact JSON

  friend bool operator==(const RawJson&, const RawJson&) = default;
};

}  // namespace moesim
