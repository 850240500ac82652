// SPDX-License-Identifier: MIT
// One collective measurement in nccl-tests' vocabulary, as `moesim calibrate` prints and writes
// it: size (bytes of the whole buffer: all-gather's output, reduce-scatter's input, all-reduce's
// buffer, what one rank sends in total for all-to-all), count (elements of `type` in that size),
// type, redop (sum, or none for the kinds that do not reduce), time (the median repeat),
// algbw = size / time and busbw = algbw x CostModel::bus_factor(kind, n) - the cost model's own
// factor, so that calibration and prediction cannot disagree on it. Plain C++ (no CUDA): tested
// without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "graph/op.hpp"

namespace moesim::cuda {

// The element type of a measurement, named as nccl-tests names it.
struct CollectiveType {
  std::string_view name;
  int64_t bytes = 0;
};
inline constexpr CollectiveType kCollectiveBf16{"bfloat16", 2};

struct CollectiveRow {
  OpKind kind = OpKind::all_reduce;
  int64_t num_ranks = 0;
  double size_bytes = 0;
  int64_t count = 0;
  CollectiveType type = kCollectiveBf16;
  std::string_view redop;
  double time_s = 0;
  double algbw_bytes_per_s = 0;
  double busbw_bytes_per_s = 0;
};

// The elements each rank contributes for a requested size: size / type bytes / n, rounded down,
// so that every rank holds a whole number of elements (all-reduce included, so that one rule
// gives every kind's size).
int64_t collective_elements_per_rank(double requested_bytes, int64_t num_ranks, CollectiveType type = kCollectiveBf16);

// The row of `kind` over `num_ranks` ranks, each with `elements_per_rank` elements, that took
// `time_s`. Throws std::invalid_argument for a kind that is not a collective, n < 2 or time <= 0.
CollectiveRow collective_row(OpKind kind, int64_t num_ranks, int64_t elements_per_rank, double time_s,
                             CollectiveType type = kCollectiveBf16);

// The text table: a header naming the columns and units (nccl-tests' order after kind, n and an
// optional tier), and one line per row; each ends in a newline.
std::string collective_table_header(bool with_tier);
std::string collective_table_line(const CollectiveRow& row, std::string_view tier = {});

}  // namespace moesim::cuda
