// SPDX-License-Identifier: MIT
#include "search/sweep_space.hpp"

#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace moesim {

struct SweepSpace::Json {
  nlohmann::json root;                                 // the scenario without its sweep
  std::vector<nlohmann::json::json_pointer> pointers;  // per axis
  std::vector<std::vector<nlohmann::json>> values;     // per axis
};

SweepSpace::SweepSpace(const InputText& input)
    : input_(input), base_(load_scenario(input)), axes_(base_.spec.sweep.axes), json_(std::make_unique<Json>()) {
  json_->root = parse_json(input);
  json_->root.erase("sweep");
  for (size_t a = 0; a < axes_.size(); ++a) {
    json_->pointers.emplace_back(axes_[a].path);
    auto& vals = json_->values.emplace_back();
    for (const RawJson& v : axes_[a].values) vals.push_back(nlohmann::json::parse(v.text));
    const auto n = static_cast<int64_t>(vals.size());
    if (num_configs_ > std::numeric_limits<int64_t>::max() / n) {
      throw InputError(input.name, "/sweep/axes/" + std::to_string(a),
                       "the product of the axes is too large to enumerate");
    }
    num_configs_ *= n;
  }
  // Trailing axes that only touch routing leave the graph alone.
  for (size_t a = axes_.size(); a-- > 0;) {
    if (!axes_[a].path.starts_with("/routing")) break;
    block_size_ *= static_cast<int64_t>(axes_[a].values.size());
  }
}

SweepSpace::~SweepSpace() = default;

std::vector<int64_t> SweepSpace::value_indices(int64_t index) const {
  std::vector<int64_t> out(axes_.size());
  for (size_t a = axes_.size(); a-- > 0;) {
    const auto n = static_cast<int64_t>(axes_[a].values.size());
    out[a] = index % n;
    index /= n;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> SweepSpace::config(int64_t index) const {
  const std::vector<int64_t> v = value_indices(index);
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t a = 0; a < axes_.size(); ++a)
    out.emplace_back(axes_[a].path, axes_[a].values[static_cast<size_t>(v[a])].text);
  return out;
}

namespace {

LoadedConfig load_variant(const InputText& input, const nlohmann::json& variant) {
  LoadedConfig out;
  // Routing shapes the graph only through capacity padding (expected_expert_rows, graph/routing.hpp):
  // the engine draws every other routing field's loads over the same graph.
  nlohmann::json structure = variant;
  if (const auto r = variant.find("routing"); r != variant.end() && r->is_object()) {
    const auto policy = r->find("capacity_policy"), factor = r->find("capacity_factor");
    if (policy != r->end() && *policy == "pad" && factor != r->end()) structure["capacity_padding"] = *factor;
  }
  structure.erase("routing");
  out.structure_key = structure.dump();
  try {
    out.scenario = load_scenario(InputText{input.name, variant.dump(), input.embedded});
  } catch (const InputError& e) {
    out.reason_path = e.path();
    out.reason = e.what();
  }
  return out;
}

}  // namespace

LoadedConfig SweepSpace::load(int64_t index) const {
  nlohmann::json variant = json_->root;
  const std::vector<int64_t> v = value_indices(index);
  for (size_t a = 0; a < axes_.size(); ++a) variant[json_->pointers[a]] = json_->values[a][static_cast<size_t>(v[a])];
  return load_variant(input_, variant);
}

LoadedConfig SweepSpace::load_with(const std::vector<std::pair<std::string, std::string>>& replacements) const {
  nlohmann::json variant = json_->root;
  for (const auto& [path, value] : replacements)
    variant[nlohmann::json::json_pointer(path)] = nlohmann::json::parse(value);
  return load_variant(input_, variant);
}

}  // namespace moesim
