// SPDX-License-Identifier: MIT
// Every shipped model loads; layer patterns resolve as the model cards say.
#include <doctest/doctest.h>

#include <filesystem>

#include "core/embedded.hpp"
#include "model/model_spec.hpp"

using namespace moesim;

namespace {
ModelSpec load(const std::string& name) { return load_model(read_input(name, "models", "MODEL")); }

int64_t count(const ModelSpec& m, AttentionKind k) {
  int64_t n = 0;
  for (const auto& l : m.layer_kinds) n += l.attention == k;
  return n;
}
int64_t count(const ModelSpec& m, FfnKind k) {
  int64_t n = 0;
  for (const auto& l : m.layer_kinds) n += l.ffn == k;
  return n;
}
}  // namespace

TEST_CASE("every file in models/ loads, is embedded, and is named as its file") {
  int shipped = 0;  // the zoo itself; subfolders hold derived models (calibration slices)
  for (const auto& entry : std::filesystem::recursive_directory_iterator("models")) {
    if (!entry.is_regular_file()) continue;
    const std::string path = entry.path().generic_string();
    CAPTURE(path);
    const ModelSpec m = load_model(read_input(path, "models", "MODEL"));
    CHECK(m.name + ".json" == entry.path().filename().string());
    CHECK(find_embedded(path).has_value());
    CHECK_FALSE(m.doc.empty());
    shipped += entry.path().parent_path() == "models";
  }
  CHECK(shipped == 19);
}

TEST_CASE("Kimi K3: 69 KDA and 24 MLA layers at 4, 8, ..., 92, 93; layer 1 dense") {
  const ModelSpec k3 = load("kimi-k3");
  REQUIRE(k3.layer_kinds.size() == 93);
  CHECK(count(k3, AttentionKind::kda) == 69);
  CHECK(count(k3, AttentionKind::mla) == 24);
  CHECK(count(k3, FfnKind::dense) == 1);
  CHECK(k3.layer_kinds[0].ffn == FfnKind::dense);
  for (int layer = 1; layer <= 93; ++layer) {
    const bool full = layer % 4 == 0 || layer == 93;
    CHECK(k3.layer_kinds[static_cast<size_t>(layer - 1)].attention == (full ? AttentionKind::mla : AttentionKind::kda));
  }
  const ModelSpec dsa = load("kimi-k3-dsa");
  CHECK(count(dsa, AttentionKind::mla_dsa) == 24);
  CHECK(dsa.dsa_indexer->top_k == 2048);
}

TEST_CASE("reference models resolve their layer patterns") {
  CHECK(count(load("deepseek-v3"), FfnKind::dense) == 3);
  CHECK(count(load("deepseek-v3.2"), AttentionKind::mla_dsa) == 61);
  const ModelSpec linear = load("kimi-linear-48b-a3b");
  CHECK(count(linear, AttentionKind::mla) == 7);
  CHECK(count(linear, AttentionKind::kda) == 20);
  CHECK(count(load("gpt3-175b"), AttentionKind::mha) == 96);
  CHECK(count(load("llama-3.1-405b"), FfnKind::dense) == 126);
}
