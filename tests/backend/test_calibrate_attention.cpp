// SPDX-License-Identifier: MIT
// calibrate --only attention on the CPU (no GPU needed): the grid of sequence lengths leaves out
// the calibration scenarios' 8,192; every case is the scenario's graph at one length, fused or
// with DSA unfused; at each length every calibrated attention kind of either graph is timed once
// per phase, on an op of one sequence's query rows - what the table is read at.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "backend/cuda/calibrate_attention.hpp"
#include "core/error.hpp"
#include "cost/calibration.hpp"

using namespace moesim;
using namespace moesim::cuda;

TEST_CASE("the length grid leaves out the calibration scenarios' own length") {
  const std::vector<int64_t> grid = attention_seq_grid(false);
  REQUIRE(grid.size() >= 3);
  CHECK(std::is_sorted(grid.begin(), grid.end()));
  CHECK(std::adjacent_find(grid.begin(), grid.end()) == grid.end());
  CHECK(std::find(grid.begin(), grid.end(), 8192) == grid.end());
  CHECK(grid.front() < 8192);
  CHECK(grid.back() > 8192);
  for (int64_t s : attention_seq_grid(true)) CHECK(std::find(grid.begin(), grid.end(), s) != grid.end());
}

TEST_CASE("each length times every calibrated attention kind of its graphs once per phase") {
  for (const bool quick : {true, false}) {
    CAPTURE(quick);
    const std::vector<AttentionCase> cases = attention_cases(kAttentionScenario, quick);
    const std::vector<int64_t> grid = attention_seq_grid(quick);
    // The K3 slice fuses DSA: each length in its fused form, then unfused.
    REQUIRE(cases.size() == 2 * grid.size());
    std::map<int64_t, std::set<std::pair<OpKind, bool>>> timed, present;
    for (size_t i = 0; i < cases.size(); ++i) {
      const AttentionCase& c = cases[i];
      CAPTURE(c.seq);
      CAPTURE(c.unfused_dsa);
      CHECK(c.seq == grid[i / 2]);
      CHECK(c.unfused_dsa == (i % 2 == 1));
      CHECK(c.scenario->spec.batch.sequence_length == c.seq);
      const Program& p = c.graph.programs[c.program];
      for (uint32_t k = 0; k < p.ops.size(); ++k) {
        const Op& op = p.ops[k];
        if (is_calibrated_attention_kind(op.kind) && (op.phase == Phase::fwd || op.phase == Phase::bwd)) {
          present[c.seq].insert({op.kind, op.phase == Phase::bwd});
        }
      }
      for (uint32_t k : c.ops) {
        const Op& op = p.ops[k];
        CHECK(is_calibrated_attention_kind(op.kind));
        CHECK((op.phase == Phase::fwd || op.phase == Phase::bwd));
        CHECK(op.m == c.seq);  // one sequence of query rows at TP 1
        CHECK(timed[c.seq].insert({op.kind, op.phase == Phase::bwd}).second);  // once per length
      }
    }
    for (int64_t seq : grid) {
      CAPTURE(seq);
      CHECK(timed[seq] == present[seq]);  // nothing left out
      CHECK(timed[seq].size() >= 6);       // KDA, DSA and MLA, forward and backward at least
    }
    // The unfused form adds kinds of its own (the indexer's score and key gather).
    CHECK(!cases[1].ops.empty());
  }
}

TEST_CASE("a scenario that cannot be read is an input error naming --scenario") {
  CHECK_THROWS_AS(attention_cases("no-such-scenario.json", true), InputError);
  try {
    (void)attention_cases("no-such-scenario.json", true);
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("--scenario") != std::string::npos);
  }
}
