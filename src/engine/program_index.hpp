// SPDX-License-Identifier: MIT
// What the engine and its post-run analyses need of a program, computed once per program: each
// op's successors and predecessor count, its queue predecessor, its collective match index, and
// its name folded over layers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/timeline.hpp"
#include "graph/program.hpp"

namespace moesim {

// Per program: successors (explicit dependents and the next op on the same queue) and the number
// of predecessors of each op; the k-th collective of each group kind gets k as its match index;
// each op's name folded over layers (see folded_name), as an index into `folded_names`.
struct ProgramIndex {
  std::vector<uint32_t> succ_begin;
  std::vector<uint32_t> succ;
  std::vector<int32_t> num_preds;
  std::vector<int32_t> match;
  std::vector<int32_t> queue_pred;  // the op before on the same queue, -1 if first
  std::vector<int32_t> folded;
  std::vector<std::string> folded_names;

  explicit ProgramIndex(const Program& p);
};

// Op names start with their unit ("layer12."); the layers' ops of one kind add up under one name.
std::string folded_name(const std::string& name);

// The largest entries first (ties by name), at most `keep`; `by_folded` is indexed like the
// program's folded names.
std::vector<std::pair<std::string, Picoseconds>> ranked(const ProgramIndex& ix, const std::vector<Picoseconds>& by_folded,
                                                        size_t keep);

}  // namespace moesim
