// SPDX-License-Identifier: MIT
// The max-min solver on its own, in the style of SimGrid's maxmin tests: capacities, weights,
// bottleneck order, incremental adds and removes, and degenerate cases, each against rates worked
// out by hand; and the definition checked on random instances.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "engine/max_min.hpp"

using namespace moesim;

namespace {

void add(MaxMinSharing& s, uint32_t id, std::vector<int32_t> resources, std::vector<double> weights) {
  s.add(id, resources, weights);
  s.share();
}

void check_definition(const MaxMinSharing& s) {
  int64_t checks = 0, violations = 0;
  s.check(checks, violations);
  CHECK(checks > 0);
  CHECK(violations == 0);
}

}  // namespace

TEST_CASE("one flow alone runs at full rate; a flow on no resource too") {
  MaxMinSharing s;
  s.reset(2);
  add(s, 0, {0}, {1.0});
  CHECK(s.rate(0) == 1.0);
  add(s, 1, {}, {});
  CHECK(s.rate(1) == 1.0);
  CHECK(s.rate(0) == 1.0);
}

TEST_CASE("n equal flows on one resource get 1/n each; the survivors speed up as flows leave") {
  MaxMinSharing s;
  s.reset(1);
  for (uint32_t i = 0; i < 4; ++i) add(s, i, {0}, {1.0});
  for (uint32_t i = 0; i < 4; ++i) CHECK(s.rate(i) == doctest::Approx(0.25));
  check_definition(s);
  s.remove(3);
  CHECK(s.affected().size() == 3);  // the flows left on the resource
  s.share();
  for (uint32_t i = 0; i < 3; ++i) CHECK(s.rate(i) == doctest::Approx(1.0 / 3));
  s.remove(2);
  s.share();
  s.remove(1);
  s.share();
  CHECK(s.rate(0) == 1.0);
}

TEST_CASE("weights: a flow of weight w takes w times the capacity per unit of rate") {
  MaxMinSharing s;
  s.reset(1);
  add(s, 0, {0}, {1.0});
  add(s, 1, {0}, {3.0});
  // Equal rates x with x + 3x = 1.
  CHECK(s.rate(0) == doctest::Approx(0.25));
  CHECK(s.rate(1) == doctest::Approx(0.25));
  // Weights that fit together never bind: both run alone.
  MaxMinSharing light;
  light.reset(1);
  add(light, 0, {0}, {0.3});
  add(light, 1, {0}, {0.6});
  CHECK(light.rate(0) == 1.0);
  CHECK(light.rate(1) == 1.0);
}

TEST_CASE("bottleneck order: the header's worked example") {
  // A on r0; B on r0 and r1; C on r1 with weight 2. r1 binds first at 1/3 (B, C); r0 then gives
  // A the 2/3 that B leaves.
  MaxMinSharing s;
  s.reset(2);
  s.add(0, {0}, {1.0});
  s.share();
  s.add(1, {0, 1}, {1.0, 1.0});
  s.share();
  s.add(2, {1}, {2.0});
  s.share();
  CHECK(s.rate(0) == doctest::Approx(2.0 / 3));
  CHECK(s.rate(1) == doctest::Approx(1.0 / 3));
  CHECK(s.rate(2) == doctest::Approx(1.0 / 3));
  check_definition(s);
}

TEST_CASE("a chain of resources: SimGrid's classic linear network") {
  // Resources r0..r2; one long flow crosses all three, one short flow on each. Every resource
  // carries two flows: all get 1/2.
  MaxMinSharing s;
  s.reset(3);
  add(s, 0, {0, 1, 2}, {1, 1, 1});
  for (uint32_t r = 0; r < 3; ++r) add(s, r + 1, {static_cast<int32_t>(r)}, {1.0});
  for (uint32_t i = 0; i < 4; ++i) CHECK(s.rate(i) == doctest::Approx(0.5));
  // Make r1 the tighter one: two more short flows there. The long flow drops to 1/4, and the
  // short flows on r0 and r2 take the 3/4 it leaves.
  add(s, 4, {1}, {1.0});
  add(s, 5, {1}, {1.0});
  CHECK(s.rate(0) == doctest::Approx(0.25));
  CHECK(s.rate(2) == doctest::Approx(0.25));
  CHECK(s.rate(1) == doctest::Approx(0.75));
  CHECK(s.rate(3) == doctest::Approx(0.75));
  check_definition(s);
}

TEST_CASE("only the connected component is re-solved") {
  MaxMinSharing s;
  s.reset(4);
  add(s, 0, {0}, {1.0});
  add(s, 1, {0}, {1.0});
  add(s, 2, {2}, {1.0});
  add(s, 3, {2}, {1.0});
  s.add(4, {0}, {1.0});
  // Flows on resource 2 are not connected to resource 0: untouched.
  CHECK(s.affected().size() == 3);
  s.share();
  CHECK(s.rate(2) == doctest::Approx(0.5));
  CHECK(s.rate(0) == doctest::Approx(1.0 / 3));
}

TEST_CASE("random instances satisfy the definition of max-min fairness") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    MaxMinSharing s;
    const int resources = 2 + static_cast<int>(rng() % 6);
    s.reset(static_cast<size_t>(resources));
    const int flows = 1 + static_cast<int>(rng() % 12);
    for (int f = 0; f < flows; ++f) {
      std::vector<int32_t> rs;
      std::vector<double> ws;
      for (int r = 0; r < resources; ++r) {
        if (rng() % 3 == 0) {
          rs.push_back(r);
          ws.push_back(0.25 + static_cast<double>(rng() % 8) / 4);
        }
      }
      s.add(static_cast<uint32_t>(f), rs, ws);
      s.share();
      int64_t checks = 0, violations = 0;
      s.check(checks, violations);
      CHECK(violations == 0);
    }
  }
}

TEST_CASE("adds and removes batched before one share give the rates of solving from scratch") {
  // The engine shares once per instant, however many flows start and end in it. Random batches
  // of starts, ends and id reuse, each followed by one share(), against a fresh solver holding
  // only the active flows: the rates agree, and every flow whose rate moved was in affected().
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    const int resources = 2 + static_cast<int>(rng() % 6);
    MaxMinSharing s;
    s.reset(static_cast<size_t>(resources));
    std::vector<std::pair<std::vector<int32_t>, std::vector<double>>> active(16);
    std::vector<bool> on(16, false);
    std::vector<double> before(16, 0);
    for (int batch = 0; batch < 12; ++batch) {
      for (uint32_t id = 0; id < 16; ++id) before[id] = on[id] ? s.rate(id) : 0;
      const int changes = 1 + static_cast<int>(rng() % 4);
      for (int c = 0; c < changes; ++c) {
        const auto id = static_cast<uint32_t>(rng() % 16);
        if (on[id]) {
          s.remove(id);
          on[id] = false;
          if (rng() % 2 != 0) continue;  // else the id is reused in the same batch
        }
        auto& [rs, ws] = active[id];
        rs.clear();
        ws.clear();
        for (int r = 0; r < resources; ++r) {
          if (rng() % 3 == 0) {
            rs.push_back(r);
            ws.push_back(0.25 + static_cast<double>(rng() % 8) / 4);
          }
        }
        s.add(id, rs, ws);
        on[id] = true;
        before[id] = -1;  // new: must be re-solved
      }
      const std::vector<uint32_t> affected = s.affected();
      s.share();
      MaxMinSharing fresh;
      fresh.reset(static_cast<size_t>(resources));
      for (uint32_t id = 0; id < 16; ++id) {
        if (on[id]) fresh.add(id, active[id].first, active[id].second);
      }
      fresh.share();
      for (uint32_t id = 0; id < 16; ++id) {
        if (!on[id]) continue;
        CHECK(s.rate(id) == doctest::Approx(fresh.rate(id)).epsilon(1e-9));
        if (s.rate(id) != before[id]) CHECK(std::find(affected.begin(), affected.end(), id) != affected.end());
      }
    }
  }
}
