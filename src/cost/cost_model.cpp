// SPDX-License-Identifier: MIT
#include "cost/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace moesim {

double CollectiveCost::seconds() const {
  double t = latency_s;
  if (up_bytes > 0) t += up_bytes / up_bandwidth;
  if (out_bytes > 0) t += out_bytes / out_bandwidth;
  return t;
}

CostModel::CostModel(const HardwareSpec& hardware) : hw_(hardware) {}

double CostModel::peak(Dtype dtype) const {
  const auto& p = hw_.device.peak_flops;
  if (auto v = p.of(dtype)) return v->value;
  // A format the device has no tensor units for (fp32 optimizer math on some NPUs) runs at the
  // best format it has, which overstates it; such ops are memory-bound in practice.
  return p.bf16.value;
}

double CostModel::efficiency(const Op& op, double rows_scale) const {
  const auto& e = hw_.efficiency;
  const double rows = static_cast<double>(op.m) * rows_scale;
  switch (op.kind) {
    case OpKind::gemm:
    case OpKind::lora_gemm:
    case OpKind::router:
    case OpKind::cce_loss:
    case OpKind::indexer_score:
      if (op.num_groups > 0 && op.kind == OpKind::lora_gemm) {
        return e.grouped_gemm.at(rows / op.num_groups);
      }
      return e.gemm.at(static_cast<double>(std::min({static_cast<double>(op.n), static_cast<double>(op.k),
                                                      std::max(rows, 1.0)})));
    case OpKind::grouped_gemm: return e.grouped_gemm.at(rows / std::max(op.num_groups, 1));
    case OpKind::flash_attention:
    case OpKind::sparse_attention:
    case OpKind::dsa_indexer: return e.attention.at(std::max(rows, 1.0));
    case OpKind::kda:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::kda_state_correction: return e.linear_attention.at(std::max(rows, 1.0));
    default: return e.gemm.max;  // elementwise work: the memory term dominates
  }
}

double CostModel::kernel_seconds(const Op& op, double rows_scale) const {
  const auto& d = hw_.device;
  if (op.kind == OpKind::swap_out || op.kind == OpKind::swap_in) {
    return d.host_memory.latency.value + op.comm_bytes / (d.host_memory.bandwidth.value * hw_.efficiency.host_copy);
  }
  const double flops = op.flops * rows_scale;
  const double bytes = (op.bytes_read + op.bytes_written) * rows_scale;
  double t = 0;
  if (flops > 0) t = flops / (peak(op.dtype) * efficiency(op, rows_scale));
  if (bytes > 0) t = std::max(t, bytes / (d.hbm_bandwidth.value * hw_.efficiency.memory));
  return t + d.kernel_launch_overhead.value;
}

double CostModel::bus_factor(OpKind kind, int64_t n) {
  const double nn = static_cast<double>(n);
  if (n <= 1) return 0;
  if (kind == OpKind::all_reduce) return 2 * (nn - 1) / nn;
  if (kind == OpKind::send || kind == OpKind::recv) return 1;
  return (nn - 1) / nn;
}

CollectiveCost CostModel::collective(OpKind kind, double bytes, const GroupPlacement& g) const {
  const auto& up = hw_.fabric.scale_up;
  const double eff = hw_.efficiency.collective;
  const double b_up = up.port_bandwidth.value * eff;
  const double a_up = up.latency.value;
  double b_out = b_up;
  double a_out = a_up;
  if (hw_.fabric.scale_out) {
    b_out = hw_.fabric.scale_out->nic_bandwidth.value * static_cast<double>(hw_.fabric.scale_out->nics_per_device) * eff;
    a_out = hw_.fabric.scale_out->latency.value;
  }
  CollectiveCost c;
  c.up_bandwidth = b_up;
  c.out_bandwidth = b_out;
  const int64_t n = g.size;
  const double nn = static_cast<double>(n);
  if (kind == OpKind::send || kind == OpKind::recv) {
    c.algorithm = CollectiveAlgorithm::p2p;
    c.latency_s = g.num_domains > 1 ? a_out : a_up;
    (g.num_domains > 1 ? c.out_bytes : c.up_bytes) = bytes;
    return c;
  }
  if (n <= 1) return c;
  const bool one_domain = g.num_domains <= 1;
  const double a = one_domain ? a_up : a_out;
  switch (kind) {
    case OpKind::all_gather:
    case OpKind::reduce_scatter: {
      if (one_domain) {
        c.algorithm = CollectiveAlgorithm::ring;
        c.latency_s = (nn - 1) * a;
        c.up_bytes = (nn - 1) / nn * bytes;
        return c;
      }
      // Hierarchical: the scale-out step moves S/m per rank between domains, the scale-up step the rest.
      const double m = static_cast<double>(g.max_per_domain);
      const double k = static_cast<double>(g.num_domains);
      c.algorithm = CollectiveAlgorithm::hierarchical;
      c.latency_s = (m - 1) * a_up + (k - 1) * a_out;
      c.up_bytes = (m - 1) / m * bytes;
      c.out_bytes = (k - 1) / k * bytes / m;
      return c;
    }
    case OpKind::all_reduce: {
      if (one_domain) {
        const double ring = 2 * (nn - 1) * a + 2 * (nn - 1) / nn * bytes / b_up;
        const double tree = 2 * std::log2(nn) * a + 2 * bytes / b_up;
        if (tree < ring) {
          c.algorithm = CollectiveAlgorithm::tree;
          c.latency_s = 2 * std::log2(nn) * a;
          c.up_bytes = 2 * bytes;
        } else {
          c.algorithm = CollectiveAlgorithm::ring;
          c.latency_s = 2 * (nn - 1) * a;
          c.up_bytes = 2 * (nn - 1) / nn * bytes;
        }
        return c;
      }
      const double m = static_cast<double>(g.max_per_domain);
      const double k = static_cast<double>(g.num_domains);
      c.algorithm = CollectiveAlgorithm::hierarchical;
      c.latency_s = 2 * (m - 1) * a_up + 2 * (k - 1) * a_out;
      c.up_bytes = 2 * (m - 1) / m * bytes;
      c.out_bytes = 2 * (k - 1) / k * bytes / m;
      return c;
    }
    case OpKind::all_to_all: {
      c.algorithm = one_domain ? CollectiveAlgorithm::direct : CollectiveAlgorithm::hierarchical;
      c.latency_s = a;
      // Of the (n-1)/n that leaves a rank, peers in other domains take the scale-out path.
      const double remote = (nn - 1) / nn * bytes;
      const double out_share = one_domain ? 0 : (nn - static_cast<double>(g.max_per_domain)) / (nn - 1);
      c.out_bytes = remote * out_share;
      c.up_bytes = remote - c.out_bytes;
      return c;
    }
    default: return c;
  }
}

}  // namespace moesim
