// SPDX-License-Identifier: MIT
// SweepSpace: the configurations of a scenario's sweep axes, and turning one of them into a
// checked Scenario.
//
// Configurations are numbered 0 .. num_configs - 1 in mixed radix, the first axis outermost (the
// last axis varies fastest), so an index names one value per axis. A configuration is the
// scenario's JSON with each axis's value written at its pointer (creating missing parent
// objects) and the sweep removed, then loaded exactly like a scenario file: an impossible
// combination is rejected with the checker's own file, JSON path and message.
//
// Configurations whose axes differ only under /routing share one op graph (routing only sizes
// the engine's expert traffic): structure_key() names the graph, and the trailing /routing axes
// form blocks of consecutive indices that share it (block_size()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_input.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

// One configuration loaded: a checked scenario, or why it is impossible.
struct LoadedConfig {
  std::optional<Scenario> scenario;
  std::string reason_path;    // rejected: the JSON pointer the checker named ("" for the whole file)
  std::string reason;         // rejected: "file: path: message", as the checker wrote it
  std::string structure_key;  // the scenario without /routing: equal keys build equal graphs
};

class SweepSpace {
 public:
  // `input` is the scenario file; its axes were checked by load_scenario (each value valid for
  // its field). Throws InputError for a product too large to number.
  explicit SweepSpace(const InputText& input);
  ~SweepSpace();
  SweepSpace(const SweepSpace&) = delete;
  SweepSpace& operator=(const SweepSpace&) = delete;

  const Scenario& base() const { return base_; }
  int64_t num_axes() const { return static_cast<int64_t>(axes_.size()); }
  const SweepAxis& axis(int64_t a) const { return axes_[static_cast<size_t>(a)]; }
  int64_t num_configs() const { return num_configs_; }
  // Consecutive configurations that differ only in trailing /routing axes (>= 1; divides
  // num_configs).
  int64_t block_size() const { return block_size_; }

  // The value index on each axis of configuration `index`.
  std::vector<int64_t> value_indices(int64_t index) const;
  // (axis path, value as compact JSON) of configuration `index`, in axis order.
  std::vector<std::pair<std::string, std::string>> config(int64_t index) const;

  // Thread-safe: reads only what the constructor built.
  LoadedConfig load(int64_t index) const;
  // The same for a scenario JSON text with arbitrary replacements (pointer -> JSON value), used
  // by capacity planning; the sweep section is dropped.
  LoadedConfig load_with(const std::vector<std::pair<std::string, std::string>>& replacements) const;

 private:
  struct Json;  // keeps nlohmann/json out of this header
  InputText input_;
  Scenario base_;
  std::vector<SweepAxis> axes_;
  std::unique_ptr<Json> json_;
  int64_t num_configs_ = 1;
  int64_t block_size_ = 1;
};

}  // namespace moesim
