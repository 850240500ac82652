// SPDX-License-Identifier: MIT
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "core/layer_set.hpp"

using namespace moesim;

TEST_CASE("layer sets: single, range, stepped range, lists") {
  CHECK(LayerSet::parse("1").indices() == std::vector<int64_t>{1});
  CHECK(LayerSet::parse("2-5").indices() == std::vector<int64_t>{2, 3, 4, 5});
  const LayerSet k3 = LayerSet::parse("4-92:4,93");
  CHECK(k3.indices().size() == 24);  // K3's full-attention layers
  CHECK(k3.indices().front() == 4);
  CHECK(k3.max_layer() == 93);
  CHECK(k3.contains(92));
  CHECK_FALSE(k3.contains(91));
  CHECK(LayerSet::parse("5, 1-2, 2").indices() == std::vector<int64_t>{1, 2, 5});  // sorted, unique
}

TEST_CASE("'all' contains every layer") {
  const LayerSet all = LayerSet::parse("all");
  CHECK(all.is_all());
  CHECK(all.contains(1));
  CHECK(all.contains(100000));
  CHECK(all.max_layer() == 0);
}

TEST_CASE("malformed layer sets are errors") {
  CHECK_THROWS_WITH_AS(LayerSet::parse("0"), doctest::Contains("start at 1"), ValueError);
  CHECK_THROWS_AS(LayerSet::parse(""), ValueError);
  CHECK_THROWS_AS(LayerSet::parse("4-x"), ValueError);
  CHECK_THROWS_AS(LayerSet::parse("5-3"), ValueError);
  CHECK_THROWS_AS(LayerSet::parse("1,,2"), ValueError);
  CHECK_THROWS_AS(LayerSet::parse("3:2"), ValueError);
  CHECK_THROWS_AS(LayerSet::parse("1-99999999999"), ValueError);
}
