// SPDX-License-Identifier: MIT
#include "core/layer_set.hpp"

#include <algorithm>
#include <charconv>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace moesim {
namespace {

constexpr int64_t kMaxLayer = limits::kMaxLayers;  // a model's layer limit; bounds the set's size

int64_t parse_index(std::string_view s, std::string_view whole) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    throw ValueError("'" + std::string(whole) + "' is not a layer set: '" + std::string(s) +
                     "' is not a layer number (expected e.g. \"1\", \"2-5\", \"4-92:4,93\" or \"all\")");
  }
  if (v < 1) throw ValueError("layer numbers start at 1, got " + std::to_string(v));
  if (v > kMaxLayer) {
    throw ValueError("layer " + std::to_string(v) + " is out of range (at most " + std::to_string(kMaxLayer) +
                     ", moesim's limit on layers)");
  }
  return v;
}

}  // namespace

LayerSet LayerSet::parse(std::string_view text) {
  if (text == "all") return all();
  LayerSet set;
  set.text_ = std::string(text);
  if (text.empty()) throw ValueError("an empty layer set; write \"all\" or e.g. \"1-4\"");
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    int64_t step = 1;
    if (size_t colon = item.find(':'); colon != std::string_view::npos) {
      step = parse_index(item.substr(colon + 1), text);
      item = item.substr(0, colon);
    }
    int64_t first = 0;
    int64_t last = 0;
    if (size_t dash = item.find('-'); dash != std::string_view::npos) {
      first = parse_index(item.substr(0, dash), text);
      last = parse_index(item.substr(dash + 1), text);
      if (last < first) {
        throw ValueError("layer range '" + std::string(item) + "' ends before it starts");
      }
    } else {
      if (step != 1) throw ValueError("a step (':') needs a range, in '" + std::string(item) + "'");
      first = last = parse_index(item, text);
    }
    // Repeated ranges ("1-10000,1-10000,...") are merged below; bound what they expand to first.
    if (static_cast<int64_t>(set.indices_.size()) + (last - first) / step + 1 > 4 * kMaxLayer) {
      throw ValueError("'" + std::string(text.substr(0, 40)) + (text.size() > 40 ? "..." : "") +
                       "' lists more than " + std::to_string(4 * kMaxLayer) + " layers");
    }
    for (int64_t i = first; i <= last; i += step) set.indices_.push_back(i);
    pos = comma + 1;
  }
  std::sort(set.indices_.begin(), set.indices_.end());
  set.indices_.erase(std::unique(set.indices_.begin(), set.indices_.end()), set.indices_.end());
  return set;
}

bool LayerSet::contains(int64_t layer) const {
  return all_ || std::binary_search(indices_.begin(), indices_.end(), layer);
}

}  // namespace moesim
