// SPDX-License-Identifier: MIT
// A set of 1-based layer indices written as a compact string: "1", "2-5", "4-92:4,93", "all".
//
// Layers are numbered from 1, as in the Kimi model cards ("full attention at 4, 8, ..., 93").
// "A-B:S" is every S-th layer from A to B inclusive. Parsing checks the syntax only; whether the
// layers exist in a given model is checked against that model (check_within).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moesim {

class LayerSet {
 public:
  LayerSet() = default;
  // Throws ValueError on a syntax error or a non-positive index.
  static LayerSet parse(std::string_view text);
  static LayerSet all() { return LayerSet(true); }

  bool is_all() const { return all_; }
  bool contains(int64_t layer) const;
  // The largest index named, 0 when "all" or empty.
  int64_t max_layer() const { return indices_.empty() ? 0 : indices_.back(); }
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::string& text() const { return text_; }

  friend bool operator==(const LayerSet&, const LayerSet&) = default;

 private:
  explicit LayerSet(bool all) : all_(all), text_(all ? "all" : "") {}

  bool all_ = false;
  std::vector<int64_t> indices_;  // sorted, unique; empty when all_
  std::string text_;
};

}  // namespace moesim
