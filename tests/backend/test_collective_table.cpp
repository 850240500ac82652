// SPDX-License-Identifier: MIT
// calibrate's collectives table (collective_table.hpp): nccl-tests' size, count, type and redop,
// algbw = size / time, and busbw through the cost model's own bus factor, checked against the
// closed forms nccl-tests defines (2(n-1)/n for all-reduce, (n-1)/n for the others), so that a
// change on either side fails here. Runs without a GPU.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/collective_table.hpp"
#include "cost/cost_model.hpp"

using namespace moesim;
using namespace moesim::cuda;

TEST_CASE("collective rows: nccl-tests' size and count, algbw = size / time, busbw by the closed forms") {
  // All-reduce of 1 MiB of BF16 per buffer over 8 ranks in 1 ms.
  const CollectiveRow r = collective_row(OpKind::all_reduce, 8, 65536, 1e-3);
  CHECK(r.count == 524288);
  CHECK(r.size_bytes == 1048576.0);
  CHECK(r.type.name == "bfloat16");
  CHECK(r.redop == "sum");
  CHECK(r.algbw_bytes_per_s == doctest::Approx(1048576.0 / 1e-3).epsilon(1e-15));
  CHECK(r.busbw_bytes_per_s == doctest::Approx(1048576.0 / 1e-3 * 2 * 7 / 8).epsilon(1e-15));

  for (const OpKind kind : {OpKind::all_reduce, OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_to_all}) {
    for (const int64_t n : {2, 3, 4, 6, 8, 64}) {
      CAPTURE(static_cast<int>(kind));
      CAPTURE(n);
      const CollectiveRow row = collective_row(kind, n, 1000, 2.5e-4);
      const double nn = static_cast<double>(n);
      const double closed_form = kind == OpKind::all_reduce ? 2 * (nn - 1) / nn : (nn - 1) / nn;
      CHECK(row.size_bytes == 2.0 * 1000 * nn);
      CHECK(row.count == 1000 * n);
      CHECK(row.busbw_bytes_per_s == row.algbw_bytes_per_s * CostModel::bus_factor(kind, n));
      CHECK(row.busbw_bytes_per_s == doctest::Approx(row.algbw_bytes_per_s * closed_form).epsilon(1e-15));
      CHECK(row.redop == (kind == OpKind::all_reduce || kind == OpKind::reduce_scatter ? "sum" : "none"));
    }
  }
}

TEST_CASE("collective sizes are whole elements per rank, so size = count x type bytes for every group size") {
  // 1 MiB over 6 ranks: 524288 BF16 elements do not split evenly; each rank gets 87381.
  CHECK(collective_elements_per_rank(1 << 20, 6) == 87381);
  const CollectiveRow r = collective_row(OpKind::all_gather, 6, collective_elements_per_rank(1 << 20, 6), 1e-4);
  CHECK(r.size_bytes == 1048572.0);
  CHECK(r.size_bytes == static_cast<double>(r.count * r.type.bytes));
  CHECK(collective_elements_per_rank(256 << 20, 8) == (256 << 20) / 2 / 8);
}

TEST_CASE("collective rows refuse what is not a measurement") {
  CHECK_THROWS_AS(collective_row(OpKind::send, 2, 10, 1e-3), std::invalid_argument);
  CHECK_THROWS_AS(collective_row(OpKind::all_reduce, 1, 10, 1e-3), std::invalid_argument);
  CHECK_THROWS_AS(collective_row(OpKind::all_reduce, 2, 10, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(collective_elements_per_rank(1 << 20, 0), std::invalid_argument);
}

TEST_CASE("collective table text: nccl-tests' columns in its order, one golden line") {
  const std::string header = collective_table_header(false);
  size_t at = 0;
  for (const char* column : {"kind", "n", "size (B)", "count", "type", "redop", "time (us)", "algbw (GB/s)", "busbw (GB/s)"}) {
    CAPTURE(column);
    const size_t found = header.find(column, at);
    REQUIRE(found != std::string::npos);
    at = found;
  }
  CHECK(collective_table_header(true).find("tier") != std::string::npos);
  const CollectiveRow r = collective_row(OpKind::reduce_scatter, 4, 32768, 2e-5);  // 256 KiB in 20 us
  CHECK(collective_table_line(r) ==
        "  reduce_scatter   4        262144        131072  bfloat16     sum        20.00          13.11           9.83\n");
  CHECK(collective_table_line(r, "intra_node") ==
        "  reduce_scatter   4  intra_node        262144        131072  bfloat16     sum        20.00          13.11           9.83\n");
  // The line's columns sit under the header's.
  CHECK(collective_table_line(r).size() == header.size());
}
