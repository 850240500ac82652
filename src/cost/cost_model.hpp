// SPDX-License-Identifier: MIT
// CostModel: how long each op takes alone on its device, from the hardware file.
//
// Kernels: a roofline with efficiencies, plus the launch overhead:
//   t = max(flops / (peak[dtype] * eff_kind(size)), bytes / (hbm_bandwidth * eff_memory)) + launch
// where eff_kind is the hardware file's curve max * x / (x + half_at) for the op's kind and size
// measure (GEMMs: min(m, n, k); grouped GEMMs: rows per expert; attention: query rows; the backward
// of attention kernels on the attention_backward curve when the file has one). Host
// copies: latency + bytes / (host bandwidth * eff_copy). A device run below the power limit its
// efficiencies were measured at (device.power) has every compute rate - peak x curve, or a
// calibrated FLOP/s - scaled by PowerSpec::compute_scale; bandwidths are not. Given a step's power
// state (cost/power_state.hpp), each compute class runs at that state's rate instead.
//
// Collectives (alone, no contention): latency terms plus the bytes each rank puts on the wire over
// the bandwidth it reaches, for the algorithm NCCL would pick:
//   ring all-gather / reduce-scatter   (n-1) a + (n-1)/n S / B
//   ring all-reduce                    2(n-1) a + 2(n-1)/n S / B
//   tree all-reduce                    2 log2(n) a + 2 S / B          (chosen when faster: small S)
//   direct all-to-all                  a + (n-1)/n S / B
//   hierarchical (group over k domains of m devices): the scale-up phases on B_up, the scale-out
//   phase on the NIC bandwidth with S/m per rank, e.g. all-reduce = RS(m) + AR(k, S/m) + AG(m).
// S is nccl-tests' size, B = port bandwidth x the collective efficiency (NIC bandwidth x the
// scale-out collective efficiency, which defaults to the same), a the fabric's
// latency. algbw = S / t and busbw = algbw x (2(n-1)/n for all-reduce, (n-1)/n otherwise), as
// nccl-tests defines them. The engine uses the split into latency and wire bytes to share links.
//
// Calibration: when the hardware file names a calibration file (cost/calibration.hpp), its
// measured tables replace the curves above for what they cover: BF16 GEMM and grouped-GEMM
// throughput (t = flops / table(x), same size measures; a linear layer whose shape the file measured
// pass by pass, version 7, sums its GEMMs' times from those tables by its tokens), memory-bound bandwidth by bytes moved,
// host-copy bandwidth by bytes, and the bus bandwidth of each collective over a group size it
// measured within one scale-up domain (t = factor * S / busbw(S), latency included; the time of
// the table's smallest size is the latency part, the rest the wire time links share).
// Version 2 files may add attention tables (flash_attention, sparse_attention, dsa_indexer,
// indexer_score, kda; forward and backward apart): t = flops / table(query rows) for BF16 ops of
// that kind and phase, without the memory term (the measured kernel includes its traffic).
// A kernels/cce table does the same for the CCE loss by hidden size (op.k), per pass
// (calibration.hpp, CcePass): t = flops / table(hidden) for fwd and recompute (forward) and bwd
// (backward, or backward_frozen when the head does not train); a pass the file lacks keeps the
// GEMM table (or curve) at min(n, k, rows).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "cost/calibration.hpp"
#include "cost/power_state.hpp"
#include "graph/op.hpp"
#include "hardware/hardware_spec.hpp"

namespace moesim {

enum class CollectiveAlgorithm : uint8_t { ring, tree, direct, hierarchical, p2p };

// Where a group's members sit on the fabric.
struct GroupPlacement {
  int64_t size = 1;
  int64_t num_domains = 1;         // scale-up domains spanned
  int64_t max_per_domain = 1;      // members in the fullest domain
};

// Where `members` (ranks) sit when ranks [k * domain_size, (k + 1) * domain_size) share scale-up
// domain k.
GroupPlacement placement_of(const std::vector<int64_t>& members, int64_t domain_size);

struct CollectiveCost {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  double latency_s = 0;       // fixed part
  double up_bytes = 0;        // bytes each member sends over its scale-up port
  double out_bytes = 0;       // bytes each member sends over its NIC(s)
  double up_bandwidth = 0;    // per member, achievable (port x efficiency)
  double out_bandwidth = 0;
  double seconds() const;     // alone: latency, then the scale-up and scale-out phases in sequence
};

class CostModel {
 public:
  explicit CostModel(const HardwareSpec& hardware);  // at fixed_power_state(hardware)
  CostModel(const HardwareSpec& hardware, const PowerState& power);

  // A kernel or host copy alone on one device. `rows_scale` scales the op's work for the
  // rows a rank actually processes (sampled routing) against the expected rows the op holds.
  double kernel_seconds(const Op& op, double rows_scale = 1.0) const;
  // A swap copy (swap_out: HBM to host, swap_in: back) of `bytes` alone: its latency and the
  // bandwidth it reaches (the calibrated bandwidth at this size when there is a table; its
  // latency is then inside the measurement).
  struct CopyCost {
    double latency_s = 0;
    double bandwidth = 0;
  };
  CopyCost host_copy(OpKind kind, double bytes) const;
  // What a memory-bound kernel moving `bytes` reaches: the calibrated memory table at that size,
  // or the HBM bandwidth times the memory efficiency.
  double memory_bandwidth(double bytes) const;
  // The same for a kernel of `kind`: without a calibrated table, the hardware's fraction for that
  // kind (efficiency.memory_by_kind) where it has one.
  double memory_bandwidth(OpKind kind, double bytes) const;
  // A collective or point-to-point op over a group placed as given, with `bytes` in nccl-tests'
  // convention (op.comm_bytes, or a sampled value for all-to-all-v).
  CollectiveCost collective(OpKind kind, double bytes, const GroupPlacement& group) const;
  // An expert all-to-all dispatched hierarchically: of the send buffer S = T k w, each token
  // crosses the scale-out network once per remote destination domain (out_fraction x S, see
  // hierarchical_out_fraction) and its copies fan out inside each domain over scale-up
  // ((m - 1) / m x S). Within one domain it is the direct all-to-all.
  CollectiveCost hierarchical_all_to_all(double bytes, const GroupPlacement& group, double out_fraction) const;
  // The share of S that crosses the scale-out network under hierarchical dispatch: the expected
  // number of remote domains holding at least one of a token's top_k experts, over top_k, when
  // the num_experts experts are spread evenly over the group's domains and a token's experts are
  // distinct and uniformly drawn. With limited routing (`groups` equal units of consecutive
  // experts - router groups, the EP group's domains or its ranks - a token's k assignments split
  // evenly over `groups_per_token` of them, uniformly chosen, as RoutingSampler models it; 0: no
  // limit) whose units each sit in one domain (units a multiple of the domains), the token
  // reaches only its units' domains.
  static double hierarchical_out_fraction(int64_t num_experts, int64_t top_k, const GroupPlacement& group,
                                          int64_t groups = 1, int64_t groups_per_token = 0);
  // nccl-tests' bus bandwidth factor of a collective over n ranks.
  static double bus_factor(OpKind kind, int64_t n);

  const HardwareSpec& hardware() const { return hw_; }
  const PowerState& power_state() const { return power_; }
  // This cost model in another power state (the calibration tables shared, not read again).
  CostModel with_power_state(const PowerState& power) const {
    CostModel c(*this);
    c.power_ = power;
    return c;
  }

  // What a transfer reaches on a link of `link_bytes_per_s`: the link x the hardware's collective
  // efficiency, on the scale-up fabric or (achievable_scale_out) through the NICs and the network's
  // switch tiers. The one place that applies them (collectives, switch tiers, copies over the fabric).
  double achievable(double link_bytes_per_s) const { return link_bytes_per_s * hw_.efficiency.collective; }
  double achievable_scale_out(double link_bytes_per_s) const {
    return link_bytes_per_s * hw_.efficiency.collective_scale_out.value_or(hw_.efficiency.collective);
  }
  double scale_up_bandwidth() const { return achievable(hw_.fabric.scale_up.port_bandwidth.value); }
  // The factor on a kernel's time while a transfer of its rank moves data.
  double overlap_slowdown() const { return hw_.efficiency.overlap_slowdown; }
  const Calibration* calibration() const { return calibration_.get(); }

  // The efficiency curve (and calibration table) an op's kind uses, and the op's size measure on
  // it (public for the trace fit, src/trace/trace_fit.cpp, which writes points where this reads them).
  enum class Curve : uint8_t { gemm, grouped_gemm, attention, linear_attention, none };
  std::pair<Curve, double> curve_of(const Op& op, double rows_scale = 1.0) const;

 private:
  double efficiency(const Op& op, double rows_scale) const;
  double peak(Dtype dtype) const;
  double compute_rate(const Op& op) const;  // power_'s rate for the op's class
  // A BF16 linear layer's time from the calibration's tables of its shape (kernels/gemm_shapes),
  // without launch overhead: each GEMM of its phase at its pass's FLOP/s for the layer's tokens;
  // nullopt when the file has no table of one of them or the op is not a plain linear layer.
  std::optional<double> measured_linear_seconds(const Op& op, double rows_scale) const;

  HardwareSpec hw_;  // a copy: a cost model is often built from a temporary
  // Compute-bound rates relative to the measured ones: the power limit's fixed scale, or a step's
  // power state (cost/power_state.hpp).
  PowerState power_;
  std::shared_ptr<const Calibration> calibration_;  // null without a calibration file; shared by copies
};

template <>
struct EnumNames<CollectiveAlgorithm> {
  static constexpr std::array<std::pair<std::string_view, CollectiveAlgorithm>, 5> names{{
      {"ring", CollectiveAlgorithm::ring},
      {"tree", CollectiveAlgorithm::tree},
      {"direct", CollectiveAlgorithm::direct},
      {"hierarchical", CollectiveAlgorithm::hierarchical},
      {"p2p", CollectiveAlgorithm::p2p},
  }};
};

}  // namespace moesim
