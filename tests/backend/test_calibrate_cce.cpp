// SPDX-License-Identifier: MIT
// calibrate --only loss on the CPU (no GPU needed): the grid of hidden sizes leaves out the
// validation scenarios' own and brackets them; every case is the base scenario's graph at that
// hidden size, whose cce_loss ops carry the shapes and flops the simulator charges (the values
// the measured times are divided by) and the pass the cost model reads them under; each op's
// dry launch sizes the operands the live launch will take.
#include <doctest/doctest.h>

#include <algorithm>
#include <initializer_list>
#include <set>

#include "backend/cuda/calibrate_cce.hpp"
#include "backend/cuda/op_kernels.hpp"
#include "core/json_input.hpp"
#include "cost/calibration.hpp"

using namespace moesim;
using namespace moesim::cuda;

namespace {

int64_t hidden_of(const char* scenario) {
  return load_scenario(read_input(scenario, "scenarios", "SCENARIO")).model.hidden_size;
}

// The bytes an arena holds after taking `sizes` in order (each start 256-byte aligned, as Arena).
size_t taken(std::initializer_list<size_t> sizes) {
  size_t used = 0;
  for (size_t b : sizes) used = (used + 255) / 256 * 256 + b;
  return used;
}

}  // namespace

TEST_CASE("the hidden-size grid brackets the validation scenarios' hidden sizes without containing them") {
  const std::vector<int64_t> grid = cce_hidden_sizes(false);
  REQUIRE(grid.size() >= 5);
  CHECK(std::is_sorted(grid.begin(), grid.end()));
  CHECK(std::adjacent_find(grid.begin(), grid.end()) == grid.end());
  for (const char* s : {"scenarios/calibration/qwen3-moe-slice-1gpu.json", "scenarios/calibration/llama-8b-slice-1gpu.json",
                        "scenarios/calibration/k3-slice-1gpu.json"}) {
    CAPTURE(s);
    const int64_t h = hidden_of(s);
    CHECK(std::find(grid.begin(), grid.end(), h) == grid.end());
    CHECK(grid.front() < h);
    CHECK(grid.back() > h);
  }
  for (int64_t h : cce_hidden_sizes(true)) CHECK(std::find(grid.begin(), grid.end(), h) != grid.end());
  // The shapes: every grid point at 8,192 rows, head trained and frozen, in the table; the row
  // probes (not in the table) at grid points, the head trained.
  const std::vector<CceShape> shapes = cce_shapes(false);
  std::set<std::pair<int64_t, bool>> in_table;
  int64_t probes = 0;
  for (const CceShape& s : shapes) {
    CAPTURE(s.hidden_size);
    CAPTURE(s.rows);
    CHECK(std::find(grid.begin(), grid.end(), s.hidden_size) != grid.end());
    if (s.in_table) {
      CHECK(s.rows == 8192);
      CHECK(in_table.insert({s.hidden_size, s.head_trains}).second);
    } else {
      CHECK(s.rows != 8192);
      CHECK(s.head_trains);
      ++probes;
    }
  }
  CHECK(in_table.size() == 2 * grid.size());
  CHECK(probes == 4);
  for (const CceShape& s : cce_shapes(true)) CHECK(s.in_table);
  // Every shape builds: the base scenario at that hidden size and token count, its CCE ops found.
  const std::vector<CceCase> cases = cce_cases(shapes);
  REQUIRE(cases.size() == shapes.size());
  for (const CceCase& c : cases) {
    CHECK(c.ops.size() == (c.shape.head_trains ? 3U : 1U));
    for (uint32_t i : c.ops) CHECK(c.graph.programs[c.program].ops[i].m == c.shape.rows);
  }
}

TEST_CASE("each case's ops are the graph's CCE ops at that hidden size: flops, pass and operands") {
  const std::vector<CceCase> cases = cce_cases({{1024, 8192, true, true}, {1024, 8192, false, true},
                                                {8192, 8192, true, true}, {8192, 8192, false, true}});
  REQUIRE(cases.size() == 4);  // per hidden size: the head trains, the head is frozen
  const double t = 8192, vocab = 151936;
  std::set<std::pair<int64_t, bool>> seen;
  for (const CceCase& c : cases) {
    const int64_t hidden = c.shape.hidden_size;
    const bool trains = c.shape.head_trains;
    CAPTURE(hidden);
    CAPTURE(trains);
    seen.insert({hidden, trains});
    CHECK(c.scenario->model.hidden_size == hidden);
    CHECK(c.scenario->model.vocab_size == 151936);
    const Program& p = c.graph.programs[c.program];
    std::vector<std::string> names;
    for (uint32_t i : c.ops) names.push_back(p.name_of(p.ops[i]));
    if (trains) {
      CHECK(names == std::vector<std::string>{"loss.cce", "loss.cce.recompute", "loss.cce.bwd"});
    } else {
      CHECK(names == std::vector<std::string>{"loss.cce.bwd"});
    }
    const double d = static_cast<double>(hidden);
    for (uint32_t i : c.ops) {
      const Op& op = p.ops[i];
      CAPTURE(p.name_of(op));
      CHECK(op.kind == OpKind::cce_loss);
      CHECK(op.dtype == Dtype::bf16);
      CHECK(op.m == 8192);
      CHECK(op.n == 151936);
      CHECK(op.k == hidden);
      CHECK(op.num_groups == 19);  // 8,192-entry chunks requested: 19 of 8,000 (op_kernels.cpp)
      const CcePass pass = cce_pass_of(op);
      if (op.phase != Phase::bwd) {
        CHECK(pass == CcePass::forward);
        CHECK(op.flops == doctest::Approx(2 * t * d * vocab));
      } else {
        CHECK(pass == (trains ? CcePass::backward : CcePass::backward_frozen));
        CHECK(op.flops == doctest::Approx((trains ? 4 : 2) * t * d * vocab));  // dh (and dW)
      }
      // The dry launch: h and the head's weight in; one chunk's logits, the loss, and in
      // backward the chunk's dlogits, dh and (when the head trains) dW out.
      Arena in, out;
      OpEnv env;
      env.graph = &c.graph;
      env.model = &c.scenario->model;
      env.in = &in;
      env.out = &out;
      launch_op(env, p, i);
      const auto td = static_cast<size_t>(8192 * hidden), vd = static_cast<size_t>(151936 * hidden);
      const size_t chunk = 8192 * 8000;
      CHECK(in.high_water() == taken({2 * td, 2 * vd}));
      size_t want = taken({2 * chunk, 4 * 8192});
      if (op.phase == Phase::bwd && trains) want = taken({2 * chunk, 4 * 8192, 2 * chunk, 2 * td, 2 * vd});
      if (op.phase == Phase::bwd && !trains) want = taken({2 * chunk, 4 * 8192, 2 * chunk, 2 * td});
      CHECK(out.high_water() == want);
    }
  }
  CHECK(seen.size() == 4);
}
