// SPDX-License-Identifier: MIT
#include "cost/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace moesim {

GroupPlacement placement_of(const std::vector<int64_t>& members, int64_t domain_size) {
  std::map<int64_t, int64_t> per_domain;
  for (int64_t m : members) ++per_domain[m / domain_size];
  GroupPlacement gp;
  gp.size = static_cast<int64_t>(members.size());
  gp.num_domains = static_cast<int64_t>(per_domain.size());
  for (const auto& [d, n] : per_domain) gp.max_per_domain = std::max(gp.max_per_domain, n);
  return gp;
}

double CollectiveCost::seconds() const {
  double t = latency_s;
  if (up_bytes > 0) t += up_bytes / up_bandwidth;
  if (out_bytes > 0) t += out_bytes / out_bandwidth;
  return t;
}

CostModel::CostModel(const HardwareSpec& hardware) : CostModel(hardware, fixed_power_state(hardware)) {}

CostModel::CostModel(const HardwareSpec& hardware, const PowerState& power) : hw_(hardware), power_(power) {
  if (hw_.calibration_input) {
    calibration_ = std::make_shared<const Calibration>(hw_.calibration_json ? load_calibration(*hw_.calibration_input, *hw_.calibration_json)
                                                                            : load_calibration(*hw_.calibration_input));
  }
}

double CostModel::peak(Dtype dtype) const {
  const auto& p = hw_.device.peak_flops;
  if (auto v = p.of(dtype)) return v->value;
  // A format the device has no tensor units for (fp32 optimizer math on some NPUs) runs at the
  // best format it has, which overstates it; such ops are memory-bound in practice.
  return p.bf16.value;
}

double CostModel::compute_rate(const Op& op) const {
  const PowerClass c = power_class(op.kind);
  // A memory-bound op's arithmetic runs on the SMs' clock as the GEMMs' does.
  return power_.rate_of(c == PowerClass::memory ? PowerClass::gemm : c);
}

std::pair<CostModel::Curve, double> CostModel::curve_of(const Op& op, double rows_scale) const {
  const double rows = static_cast<double>(op.m) * rows_scale;
  switch (op.kind) {
    case OpKind::gemm:
    case OpKind::lora_gemm:
    case OpKind::router:
    case OpKind::cce_loss:
    case OpKind::indexer_score:
      if (op.num_groups > 0 && op.kind == OpKind::lora_gemm) return {Curve::grouped_gemm, rows / op.num_groups};
      return {Curve::gemm, std::min({static_cast<double>(op.n), static_cast<double>(op.k), std::max(rows, 1.0)})};
    case OpKind::grouped_gemm: return {Curve::grouped_gemm, rows / std::max(op.num_groups, 1)};
    case OpKind::flash_attention:
    case OpKind::sparse_attention:
    case OpKind::dsa_indexer: return {Curve::attention, std::max(rows, 1.0)};
    case OpKind::kda:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::kda_state_correction: return {Curve::linear_attention, std::max(rows, 1.0)};
    case OpKind::embedding:
    case OpKind::norm:
    case OpKind::activation:
    case OpKind::elementwise:
    case OpKind::short_conv:
    case OpKind::permute:
    case OpKind::unpermute:
    case OpKind::kda_gate_cumsum:
    case OpKind::topk:
    case OpKind::kv_gather:
    case OpKind::attention_residual:
    case OpKind::cross_entropy:
    case OpKind::optimizer:
    case OpKind::host_optimizer:
    case OpKind::grad_accumulate:
    case OpKind::dp_copy:
    case OpKind::swap_out:
    case OpKind::swap_in:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_reduce:
    case OpKind::all_to_all:
    case OpKind::send:
    case OpKind::recv: return {Curve::none, 0};
  }
  return {Curve::none, 0};  // unreachable: every OpKind is listed above
}

double CostModel::efficiency(const Op& op, double rows_scale) const {
  const auto& e = hw_.efficiency;
  const auto [curve, x] = curve_of(op, rows_scale);
  switch (curve) {
    case Curve::gemm: return op.dtype == Dtype::fp8 && e.gemm_fp8 ? e.gemm_fp8->at(x) : e.gemm.at(x);
    case Curve::grouped_gemm: return e.grouped_gemm.at(x);
    case Curve::attention:
      return op.phase == Phase::bwd && e.attention_backward ? e.attention_backward->at(x) : e.attention.at(x);
    case Curve::linear_attention: return e.linear_attention.at(x);
    case Curve::none: return e.gemm.max;  // elementwise work: the memory term dominates
  }
  return e.gemm.max;
}

CostModel::CopyCost CostModel::host_copy(OpKind kind, double bytes) const {
  const Calibration* cal = calibration_.get();
  // Calibrated: the measured bandwidth at this size (its latency is inside the measurement).
  const std::optional<CalibrationTable>* table =
      !cal ? nullptr : kind == OpKind::swap_out ? &cal->d2h_bytes_per_s : &cal->h2d_bytes_per_s;
  if (table && *table) return {0.0, (*table)->at(bytes)};
  const auto& host = hw_.device.host_memory;
  return {host.latency.value, host.bandwidth.value * hw_.efficiency.host_copy};
}

std::optional<double> CostModel::measured_linear_seconds(const Op& op, double rows_scale) const {
  const Calibration* cal = calibration_.get();
  if (!cal || cal->gemm_shapes.empty() || op.kind != OpKind::gemm || op.dtype != Dtype::bf16 || op.num_groups > 0 ||
      rows_scale != 1.0 || op.m <= 0) {
    return std::nullopt;
  }
  // fwd and recompute run the forward GEMM; bwd the input gradient, then the weight's if it trains.
  const bool bwd = op.phase == Phase::bwd;
  const std::array<GemmPass, 2> passes{bwd ? GemmPass::input_grad : GemmPass::forward, GemmPass::weight_grad};
  const size_t num_passes = bwd && op.trainable_weight ? 2 : 1;
  // Only a plain linear layer: its FLOPs are 2 m n k per GEMM it runs.
  const double one = 2.0 * static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.k);
  if (std::abs(op.flops - one * static_cast<double>(num_passes)) > 1e-9 * op.flops) return std::nullopt;
  double seconds = 0;
  for (size_t i = 0; i < num_passes; ++i) {
    const CalibrationTable* table = cal->gemm_shape_table(passes[i], op.n, op.k);
    if (!table) return std::nullopt;
    seconds += one / (table->at(static_cast<double>(op.m)) * compute_rate(op));
  }
  return seconds;
}

double CostModel::kernel_seconds(const Op& op, double rows_scale) const {
  const auto& d = hw_.device;
  const Calibration* cal = calibration_.get();
  if (op.kind == OpKind::swap_out || op.kind == OpKind::swap_in) {
    const CopyCost c = host_copy(op.kind, op.comm_bytes);
    return c.latency_s + op.comm_bytes / c.bandwidth;
  }
  if (op.kind == OpKind::host_optimizer) {
    // CPU offload's optimizer step: memory-bound on the host, every device of the node stepping at
    // once on its share of the node's CPU optimizer bandwidth (hardware_spec.hpp).
    const double per_device = d.host_memory.cpu_optimizer_bandwidth.value / static_cast<double>(hw_.devices_per_node);
    return (op.bytes_read + op.bytes_written) / per_device;
  }
  const double flops = op.flops * rows_scale;
  const double bytes = (op.bytes_read + op.bytes_written) * rows_scale;
  // Each kernel of a decomposed op (an eager norm: several) pays the launch overhead.
  const double launch_s = d.kernel_launch_overhead.value * static_cast<double>(std::max(op.num_kernels, 1));
  // A quantised matmul's casts are memory-bound kernels of their own, before it: their time adds.
  const double cast_s = op.cast_bytes > 0 ? op.cast_bytes * rows_scale / memory_bandwidth(op.cast_bytes * rows_scale) : 0;
  // Calibrated attention kernels (format version 2): the measured FLOP/s of this kind and phase
  // at the op's query rows, for the op's own flops. The measurement is the whole kernel (its memory
  // traffic included), so no roofline max with the memory term.
  if (cal && op.dtype == Dtype::bf16) {
    if (const CalibrationTable* att = cal->attention_table(op.kind, op.phase)) {
      const double rows = std::max(static_cast<double>(op.m) * rows_scale, 1.0);
      const bool counts_bytes = attention_table_counts_bytes(op.kind);
      const double work = counts_bytes ? bytes : flops;
      if (work > 0) return work / (att->at(rows) * (counts_bytes ? 1.0 : compute_rate(op))) + launch_s;
    }
  }
  // Calibrated CCE loss (kernels/cce): the executor's chunked loss measured whole - logits GEMMs,
  // the logits' round trip through HBM, the softmax kernels - at the op's hidden size, for its
  // pass (forward: fwd and recompute; backward with or without dW). Without that pass's table the
  // op stays on the GEMM table or curve below, as one fused kernel at GEMM efficiency.
  if (cal && op.dtype == Dtype::bf16 && flops > 0) {
    if (const CalibrationTable* cce = cal->cce_table(op)) return flops / (cce->at(static_cast<double>(op.k)) * compute_rate(op)) + launch_s;
  }
  // Calibrated memory-bound kernels of this kind and pass (kernels/memory_by_kind): the measured
  // rate is the whole kernel, its arithmetic included, so no roofline max with the FLOP term.
  if (cal && bytes > 0 && is_memory_bound_kind(op.kind)) {
    if (const CalibrationTable* mem = cal->memory_table(op)) return bytes / mem->at(bytes) + cast_s + launch_s;
  }
  if (const std::optional<double> t = measured_linear_seconds(op, rows_scale)) return *t + cast_s + launch_s;
  double t = 0;
  if (flops > 0) {
    // Calibrated BF16 GEMMs run at the measured FLOP/s for their size measure; the rest on the curve.
    const auto [curve, x] = curve_of(op, rows_scale);
    const std::optional<CalibrationTable>* table = nullptr;
    if (cal && op.dtype == Dtype::bf16 && curve == Curve::gemm) table = &cal->gemm_flops_per_s;
    if (cal && op.dtype == Dtype::bf16 && curve == Curve::grouped_gemm) table = &cal->grouped_gemm_flops_per_s;
    // A calibrated GEMM's measured FLOP/s is the whole kernel, its memory traffic included (as the
    // attention tables): no roofline max with the memory term, whose table may come from slower
    // memory-bound kernels (a fit to a profiler trace, src/trace/trace_fit.hpp).
    if (table && *table) return flops / ((*table)->at(x) * compute_rate(op)) + cast_s + launch_s;
    t = flops / (peak(op.dtype) * compute_rate(op) * efficiency(op, rows_scale));
  }
  if (bytes > 0) t = std::max(t, bytes / memory_bandwidth(op.kind, bytes));
  return t + cast_s + launch_s;
}

double CostModel::memory_bandwidth(OpKind kind, double bytes) const {
  const Calibration* cal = calibration_.get();
  if ((cal && cal->memory_bytes_per_s) || !hw_.efficiency.memory_by_kind) return memory_bandwidth(bytes);
  const MemoryKindsSpec& k = *hw_.efficiency.memory_by_kind;
  std::optional<double> fraction;
  switch (kind) {
    case OpKind::norm: fraction = k.norm; break;
    case OpKind::activation: fraction = k.activation; break;
    case OpKind::elementwise: fraction = k.elementwise; break;
    case OpKind::optimizer: fraction = k.optimizer; break;
    case OpKind::dp_copy: fraction = k.dp_copy; break;
    default: break;
  }
  return fraction ? hw_.device.hbm_bandwidth.value * *fraction : memory_bandwidth(bytes);
}

double CostModel::memory_bandwidth(double bytes) const {
  const Calibration* cal = calibration_.get();
  return cal && cal->memory_bytes_per_s ? cal->memory_bytes_per_s->at(bytes)
                                        : hw_.device.hbm_bandwidth.value * hw_.efficiency.memory;
}

double CostModel::bus_factor(OpKind kind, int64_t n) {
  const double nn = static_cast<double>(n);
  if (n <= 1) return 0;
  if (kind == OpKind::all_reduce) return 2 * (nn - 1) / nn;
  if (kind == OpKind::send || kind == OpKind::recv) return 1;
  return (nn - 1) / nn;
}

double CostModel::hierarchical_out_fraction(int64_t num_experts, int64_t top_k, const GroupPlacement& g,
                                            int64_t groups, int64_t groups_per_token) {
  if (g.num_domains <= 1 || top_k <= 0) return 0;
  // C(n - m, k) / C(n, k): no pick among k distinct draws from n falls in a given m.
  auto none_of = [&](double n, double m) {
    double p = 1;
    for (int64_t i = 0; i < top_k; ++i) p *= std::max(0.0, (n - m - static_cast<double>(i)) / (n - static_cast<double>(i)));
    return p;
  };
  const double e = static_cast<double>(num_experts);
  const auto domains = static_cast<double>(g.num_domains);
  const bool limited = groups_per_token > 0 && groups_per_token < groups && groups % g.num_domains == 0;
  if (!limited) {
    // A remote domain holds E_d = E m / n experts; it is missed when all k fall elsewhere.
    const double e_d = e * static_cast<double>(g.max_per_domain) / static_cast<double>(g.size);
    return (domains - 1) * (1 - none_of(e, e_d)) / static_cast<double>(top_k);
  }
  // Limited routing's even split (routing.hpp): the token's k assignments reach min(c, k) of its
  // units, under uniform routing a uniformly drawn set of them. A domain holds G/D units and is
  // missed when all of those fall elsewhere: C(G - G/D, r) / C(G, r).
  const int64_t reached = std::min(groups_per_token, top_k);
  const auto units = static_cast<double>(groups);
  const double per_domain = units / domains;
  double missed = 1;
  for (int64_t i = 0; i < reached; ++i) {
    missed *= std::max(0.0, (units - per_domain - static_cast<double>(i)) / (units - static_cast<double>(i)));
  }
  return (domains - 1) * (1 - missed) / static_cast<double>(top_k);
}

CollectiveCost CostModel::hierarchical_all_to_all(double bytes, const GroupPlacement& g, double out_fraction) const {
  CollectiveCost c = collective(OpKind::all_to_all, bytes, g);
  if (g.num_domains <= 1) return c;
  const double m = static_cast<double>(g.max_per_domain);
  c.out_bytes = out_fraction * bytes;
  c.up_bytes = (m - 1) / m * bytes;
  return c;
}

CollectiveCost CostModel::collective(OpKind kind, double bytes, const GroupPlacement& g) const {
  const auto& up = hw_.fabric.scale_up;
  const double b_up = scale_up_bandwidth();
  const double a_up = up.latency.value;
  double b_out = b_up;
  double a_out = a_up;
  if (hw_.fabric.scale_out) {
    b_out = achievable_scale_out(hw_.fabric.scale_out->nic_bandwidth.value *
                                 static_cast<double>(hw_.fabric.scale_out->nics_per_device));
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
  // Calibrated: the measured bus bandwidth of this collective over this group size, which includes
  // NCCL's latency and algorithm choice: t = factor * S / busbw(S) = S / algbw. The time of the
  // smallest measured size (latency-bound) is the fixed part, which links do not share; the rest
  // is the wire time the engine shares. Alone, the two add up to the measured t.
  if (const CalibrationTable* busbw = calibration_ && one_domain ? calibration_->collective(kind, n) : nullptr) {
    const double factor = bus_factor(kind, n);
    const auto& [x0, y0] = busbw->points().front();
    const double t = factor * bytes / busbw->at(bytes);
    c.algorithm = kind == OpKind::all_to_all ? CollectiveAlgorithm::direct : CollectiveAlgorithm::ring;
    c.latency_s = std::min(factor * x0 / y0, t);
    if (t > c.latency_s) {
      c.up_bytes = factor * bytes;
      c.up_bandwidth = c.up_bytes / (t - c.latency_s);
    }
    return c;
  }
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
    case OpKind::send:  // returned above
    case OpKind::recv:
    case OpKind::embedding:  // not communication
    case OpKind::norm:
    case OpKind::gemm:
    case OpKind::lora_gemm:
    case OpKind::grouped_gemm:
    case OpKind::activation:
    case OpKind::elementwise:
    case OpKind::short_conv:
    case OpKind::router:
    case OpKind::permute:
    case OpKind::unpermute:
    case OpKind::flash_attention:
    case OpKind::kda:
    case OpKind::kda_gate_cumsum:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::kda_state_correction:
    case OpKind::dsa_indexer:
    case OpKind::indexer_score:
    case OpKind::topk:
    case OpKind::kv_gather:
    case OpKind::sparse_attention:
    case OpKind::attention_residual:
    case OpKind::cross_entropy:
    case OpKind::cce_loss:
    case OpKind::optimizer:
    case OpKind::host_optimizer:
    case OpKind::grad_accumulate:
    case OpKind::dp_copy:
    case OpKind::swap_out:
    case OpKind::swap_in: return c;
  }
  return c;  // unreachable: every OpKind is listed above
}

}  // namespace moesim
