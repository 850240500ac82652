// SPDX-License-Identifier: MIT
#include "core/fields.hpp"

namespace moesim::detail {

std::string describe_bounds(const Bounds& b) {
  std::string out;
  if (b.min && b.max) {
    return std::string(b.min_exclusive ? "in (" : "in [") + format_number(*b.min) + ", " + format_number(*b.max) + "]";
  }
  if (b.min) out = (b.min_exclusive ? "> " : ">= ") + format_number(*b.min);
  if (b.max) out = "<= " + format_number(*b.max);
  return out;
}

std::string short_dump(const nlohmann::json& j) {
  std::string s = j.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string json_type_name(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "an integer";
    case nlohmann::json::value_t::number_float: return "a number";
    default: return "a value";
  }
}

}  // namespace moesim::detail

namespace moesim {

std::string rows_to_markdown(const std::vector<FieldRow>& rows) {
  auto cell = [](std::string s) {
    std::string out;
    for (char c : s) {
      if (c == '|') {
        out += "\\|";
      } else {
        out += c;
      }
    }
    return out;
  };
  std::string out = "| field | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& r : rows) {
    out += "| `" + r.path + "` | " + cell(r.type) + " | " + (r.default_value.empty() ? "**required**" : cell(r.default_value)) +
           " | " + cell(r.doc) + " |\n";
  }
  return out;
}

}  // namespace moesim
