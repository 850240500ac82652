// SPDX-License-Identifier: MIT
// Declare each input field once; the declaration drives parsing, `moesim describe` and
// docs/inputs.md.
//
// An input struct S is declared by one function template in its own .cpp file:
//
//   template <class Fields> void declare_fields(Fields& f, MoeSpec& s) {
//     f.required("num_experts", s.num_experts, "Routed experts per MoE layer.", positive());
//     f.optional("num_shared_experts", s.num_shared_experts, int64_t{0}, "Shared experts.", non_negative());
//   }
//
// FieldReader runs it against a JSON object (reading values, checking types, units and bounds,
// and finally rejecting keys nobody declared); FieldDescriber runs it against a default S and
// records one row per field (JSON path, type, default, doc). Supported field types: bool, integers,
// double, std::string, enums with EnumNames, Quantity<D>, LayerSet, std::vector<T>, and nested
// structs that have their own declare_fields. Cross-field checks (top_k <= num_experts) live in
// each spec's validate function, which reports with FieldReader::fail-style InputErrors.
//
// Include only from .cpp files: it pulls in nlohmann/json.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.hpp"
#include "core/field_row.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/layer_set.hpp"
#include "core/raw_json.hpp"
#include "core/units.hpp"

namespace moesim {

// Bounds on a numeric field (quantities are checked on their value in base units).
struct Bounds {
  std::optional<double> min;
  bool min_exclusive = false;
  std::optional<double> max;
};
// `max` is an upper limit (core/limits.hpp), shown by `moesim describe` like the lower one.
inline Bounds positive(std::optional<double> max = std::nullopt) { return {0.0, true, max}; }
inline Bounds non_negative(std::optional<double> max = std::nullopt) { return {0.0, false, max}; }
inline Bounds at_least(double v, std::optional<double> max = std::nullopt) { return {v, false, max}; }
inline Bounds between(double lo, double hi) { return {lo, false, hi}; }


namespace detail {

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {
  using Element = T;
};

template <class T>
struct IsQuantity : std::false_type {};
template <Dimension D>
struct IsQuantity<Quantity<D>> : std::true_type {
  static constexpr Dimension dimension = D;
};

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires { EnumNames<E>::names; };

template <class T>
concept Integer = std::integral<T> && !std::same_as<T, bool>;

std::string describe_bounds(const Bounds& b);
std::string short_dump(const nlohmann::json& j);
std::string json_type_name(const nlohmann::json& j);

// Integers print without a fraction ("1", not "1.0").
inline std::string format_number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  return nlohmann::json(v).dump();
}

}  // namespace detail

class FieldReader {
 public:
  FieldReader(const std::string& file, const nlohmann::json& node, std::string path)
      : file_(file), node_(node), path_(std::move(path)) {}

  template <class T>
  void required(std::string_view key, T& out, std::string_view /*doc*/, Bounds bounds = {}) {
    const nlohmann::json* value = take(key);
    if (value == nullptr) fail(key, "missing required key");
    read(*value, out, child_path(key), bounds);
  }

  template <class T>
  void optional(std::string_view key, T& out, T fallback, std::string_view /*doc*/, Bounds bounds = {}) {
    const nlohmann::json* value = take(key);
    if (value == nullptr) {
      out = std::move(fallback);
      return;
    }
    read(*value, out, child_path(key), bounds);
  }

  // A field with no default: absent or null stays std::nullopt (its meaning is documented in doc;
  // null lets a sweep axis or an edited file switch it off).
  template <class T>
  void maybe(std::string_view key, std::optional<T>& out, std::string_view /*doc*/, Bounds bounds = {}) {
    const nlohmann::json* value = take(key);
    if (value == nullptr || value->is_null()) {
      out.reset();
      return;
    }
    out.emplace();
    read(*value, *out, child_path(key), bounds);
  }

  // Rejects every key of the object that no declaration took.
  void reject_unknown_keys() const {
    for (const auto& [key, value] : node_.items()) {
      if (!taken_.contains(key)) {
        throw InputError(file_, pointer_append(path_, key), "unknown key (see `moesim describe`)");
      }
    }
  }

  [[noreturn]] void fail(std::string_view key, const std::string& message) const {
    throw InputError(file_, child_path(key), message);
  }

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Reads a whole struct from a JSON object.
  template <class S>
  static void read_object(const std::string& file, const nlohmann::json& node, const std::string& path, S& out) {
    if (!node.is_object()) {
      throw InputError(file, path.empty() ? "/" : path, "expected an object, got " + detail::json_type_name(node));
    }
    FieldReader reader(file, node, path);
    declare_fields(reader, out);
    reader.reject_unknown_keys();
  }

 private:
  std::string child_path(std::string_view key) const { return pointer_append(path_, key); }

  const nlohmann::json* take(std::string_view key) {
    taken_.insert(std::string(key));
    auto it = node_.find(key);
    return it == node_.end() ? nullptr : &*it;
  }

  [[noreturn]] void type_error(const std::string& path, const nlohmann::json& j, std::string_view expected) const {
    throw InputError(file_, path,
                     "expected " + std::string(expected) + ", got " + detail::json_type_name(j) + " " +
                         detail::short_dump(j));
  }

  void check_bounds(const std::string& path, double v, const Bounds& b, const std::string& shown) const {
    const bool low = b.min && (b.min_exclusive ? !(v > *b.min) : !(v >= *b.min));
    const bool high = b.max && !(v <= *b.max);
    if (!std::isfinite(v)) throw InputError(file_, path, "must be finite, got " + shown);
    if (low || high) {
      std::string rule = detail::describe_bounds(b);
      if (low && b.min == 0.0 && b.min_exclusive) rule = "positive";
      throw InputError(file_, path, "must be " + rule + ", got " + shown);
    }
  }

  template <class T>
  void read(const nlohmann::json& j, T& out, const std::string& path, const Bounds& bounds) const {
    if constexpr (std::same_as<T, bool>) {
      if (!j.is_boolean()) type_error(path, j, "true or false");
      out = j.get<bool>();
    } else if constexpr (detail::Integer<T>) {
      if (j.is_number_integer() || j.is_number_unsigned()) {
        if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
          throw InputError(file_, path, "integer " + j.dump() + " is too large");
        }
        out = j.get<T>();
      } else if (j.is_number_float() && std::floor(j.get<double>()) == j.get<double>() &&
                 std::fabs(j.get<double>()) < 9e15) {
        out = static_cast<T>(j.get<double>());
      } else {
        type_error(path, j, "an integer");
      }
      check_bounds(path, static_cast<double>(out), bounds, std::to_string(out));
    } else if constexpr (std::floating_point<T>) {
      if (!j.is_number()) type_error(path, j, "a number");
      out = j.get<T>();
      check_bounds(path, out, bounds, detail::format_number(out));
    } else if constexpr (std::same_as<T, std::string>) {
      if (!j.is_string()) type_error(path, j, "a string");
      out = j.get<std::string>();
    } else if constexpr (detail::NamedEnum<T>) {
      if (!j.is_string()) type_error(path, j, "one of " + enum_choices<T>());
      auto v = enum_from_name<T>(j.get<std::string>());
      if (!v) throw InputError(file_, path, "'" + j.get<std::string>() + "' is not one of " + enum_choices<T>());
      out = *v;
    } else if constexpr (detail::IsQuantity<T>::value) {
      constexpr Dimension dim = detail::IsQuantity<T>::dimension;
      if (!j.is_string()) {
        type_error(path, j, "a quantity with a unit as a string, e.g. \"" + format_quantity(1e12, dim) + "\"");
      }
      try {
        out.value = parse_quantity(j.get<std::string>(), dim);
      } catch (const ValueError& e) {
        throw InputError(file_, path, e.what());
      }
      check_bounds(path, out.value, bounds, "'" + j.get<std::string>() + "'");
    } else if constexpr (std::same_as<T, LayerSet>) {
      if (!j.is_string()) type_error(path, j, "a layer set string such as \"1-3,4-92:4\"");
      try {
        out = LayerSet::parse(j.get<std::string>());
      } catch (const ValueError& e) {
        throw InputError(file_, path, e.what());
      }
    } else if constexpr (std::same_as<T, RawJson>) {
      out.text = j.dump();
    } else if constexpr (detail::IsVector<T>::value) {
      if (!j.is_array()) type_error(path, j, "an array");
      out.clear();
      out.resize(j.size());
      for (size_t i = 0; i < j.size(); ++i) read(j[i], out[i], path + "/" + std::to_string(i), bounds);
    } else {
      read_object(file_, j, path, out);
    }
  }

  const std::string& file_;
  const nlohmann::json& node_;
  std::string path_;
  std::set<std::string, std::less<>> taken_;
};

class FieldDescriber {
 public:
  explicit FieldDescriber(std::vector<FieldRow>& rows, std::string path = "") : rows_(rows), path_(std::move(path)) {}

  template <class T>
  void required(std::string_view key, T& out, std::string_view doc, Bounds bounds = {}) {
    add(key, out, "", doc, bounds);
  }

  template <class T>
  void optional(std::string_view key, T& out, T fallback, std::string_view doc, Bounds bounds = {}) {
    add(key, out, show_default(fallback), doc, bounds);
  }

  template <class T>
  void maybe(std::string_view key, std::optional<T>& /*out*/, std::string_view doc, Bounds bounds = {}) {
    T value{};
    add(key, value, "absent", doc, bounds);
  }

  // Rows for every field of S, under `path`.
  template <class S>
  static std::vector<FieldRow> describe(const std::string& path = "") {
    std::vector<FieldRow> rows;
    S value{};
    FieldDescriber d(rows, path);
    declare_fields(d, value);
    return rows;
  }

 private:
  template <class T>
  void add(std::string_view key, T& out, std::string default_value, std::string_view doc, const Bounds& bounds) {
    const std::string path = pointer_append(path_, key);
    rows_.push_back(FieldRow{path, type_of<T>(bounds), std::move(default_value), std::string(doc)});
    recurse(path, out);
  }

  template <class T>
  void recurse(const std::string& path, T& out) {
    if constexpr (detail::IsVector<T>::value) {
      typename detail::IsVector<T>::Element element{};
      recurse(path + "/*", element);
    } else if constexpr (is_struct<T>()) {
      FieldDescriber child(rows_, path);
      declare_fields(child, out);
    }
  }

  template <class T>
  static constexpr bool is_struct() {
    return std::is_class_v<T> && !std::same_as<T, std::string> && !std::same_as<T, LayerSet> &&
           !std::same_as<T, RawJson> &&
           !detail::IsQuantity<T>::value && !detail::IsVector<T>::value;
  }

  template <class T>
  static std::string type_of(const Bounds& bounds) {
    std::string b = detail::describe_bounds(bounds);
    if constexpr (std::same_as<T, bool>) {
      return "boolean";
    } else if constexpr (detail::Integer<T>) {
      return b.empty() ? "integer" : "integer " + b;
    } else if constexpr (std::floating_point<T>) {
      return b.empty() ? "number" : "number " + b;
    } else if constexpr (std::same_as<T, std::string>) {
      return "string";
    } else if constexpr (detail::NamedEnum<T>) {
      return "one of " + enum_choices<T>();
    } else if constexpr (detail::IsQuantity<T>::value) {
      std::string t = std::string(dimension_name(detail::IsQuantity<T>::dimension));
      return b.empty() ? t : t + " " + b;
    } else if constexpr (std::same_as<T, LayerSet>) {
      return "layer set";
    } else if constexpr (std::same_as<T, RawJson>) {
      return "any JSON value";
    } else if constexpr (detail::IsVector<T>::value) {
      return "array of " + type_of<typename detail::IsVector<T>::Element>(bounds);
    } else {
      return "object";
    }
  }

  template <class T>
  static std::string show_default(const T& v) {
    if constexpr (std::same_as<T, bool>) {
      return v ? "true" : "false";
    } else if constexpr (detail::Integer<T>) {
      return std::to_string(v);
    } else if constexpr (std::floating_point<T>) {
      return detail::format_number(v);
    } else if constexpr (std::same_as<T, std::string>) {
      return "\"" + v + "\"";
    } else if constexpr (detail::NamedEnum<T>) {
      return std::string(enum_name(v));
    } else if constexpr (detail::IsQuantity<T>::value) {
      return format(v);
    } else if constexpr (std::same_as<T, LayerSet>) {
      return v.text().empty() ? "(none)" : "\"" + v.text() + "\"";
    } else if constexpr (std::same_as<T, RawJson>) {
      return v.text;
    } else if constexpr (detail::IsVector<T>::value) {
      if (v.empty()) return "[]";
      std::string out;
      for (const auto& e : v) out += (out.empty() ? "" : ", ") + show_default(e);
      return "[" + out + "]";
    } else {
      return "(see fields)";
    }
  }

  std::vector<FieldRow>& rows_;
  std::string path_;
};

}  // namespace moesim
