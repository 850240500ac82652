// SPDX-License-Identifier: MIT
#include "backend/cuda/collective_table.hpp"

#include <cstdio>
#include <stdexcept>

#include "core/enum_names.hpp"
#include "cost/cost_model.hpp"

namespace moesim::cuda {

int64_t collective_elements_per_rank(double requested_bytes, int64_t num_ranks, CollectiveType type) {
  if (num_ranks < 1 || type.bytes < 1) throw std::invalid_argument("collective_elements_per_rank: n and type bytes must be >= 1");
  return static_cast<int64_t>(requested_bytes) / type.bytes / num_ranks;
}

CollectiveRow collective_row(OpKind kind, int64_t num_ranks, int64_t elements_per_rank, double time_s,
                             CollectiveType type) {
  if (!is_collective(kind)) throw std::invalid_argument("collective_row: not a collective");
  if (num_ranks < 2) throw std::invalid_argument("collective_row: a collective needs n >= 2");
  if (!(time_s > 0)) throw std::invalid_argument("collective_row: time must be > 0");
  CollectiveRow r;
  r.kind = kind;
  r.num_ranks = num_ranks;
  r.count = elements_per_rank * num_ranks;
  r.type = type;
  r.size_bytes = static_cast<double>(r.count * type.bytes);
  r.redop = kind == OpKind::all_reduce || kind == OpKind::reduce_scatter ? "sum" : "none";
  r.time_s = time_s;
  r.algbw_bytes_per_s = r.size_bytes / time_s;
  r.busbw_bytes_per_s = r.algbw_bytes_per_s * CostModel::bus_factor(kind, num_ranks);
  return r;
}

std::string collective_table_header(bool with_tier) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-15s %2s  ", "kind", "n");
  std::string h = buf;
  if (with_tier) {
    std::snprintf(buf, sizeof buf, "%-10s  ", "tier");
    h += buf;
  }
  std::snprintf(buf, sizeof buf, "%12s  %12s  %8s  %6s  %11s  %13s  %13s\n", "size (B)", "count", "type", "redop",
                "time (us)", "algbw (GB/s)", "busbw (GB/s)");
  return h + buf;
}

std::string collective_table_line(const CollectiveRow& row, std::string_view tier) {
  const std::string kind(enum_name(row.kind));
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-15s %2lld  ", kind.c_str(), static_cast<long long>(row.num_ranks));
  std::string line = buf;
  if (!tier.empty()) {
    std::snprintf(buf, sizeof buf, "%-10.*s  ", static_cast<int>(tier.size()), tier.data());
    line += buf;
  }
  std::snprintf(buf, sizeof buf, "%12.0f  %12lld  %8.*s  %6.*s  %11.2f  %13.2f  %13.2f\n", row.size_bytes,
                static_cast<long long>(row.count), static_cast<int>(row.type.name.size()), row.type.name.data(),
                static_cast<int>(row.redop.size()), row.redop.data(), row.time_s * 1e6, row.algbw_bytes_per_s / 1e9,
                row.busbw_bytes_per_s / 1e9);
  return line + buf;
}

}  // namespace moesim::cuda
