// SPDX-License-Identifier: MIT
// The kernel measurements the hardware files' efficiencies come from: reads
// hardware/efficiency/kernel-points.json (format below) into KernelPoints in the cost model's terms,
// for fit_efficiency_curve (efficiency_fit.hpp), the fit_efficiency tool and the test that checks
// the shipped hardware files against the fits. Not read by the simulator itself.
//
// Each fit names a hardware file and a curve of its `efficiency` block and lists sets of points,
// each from one source (sources carry title, URL, locator and conditions). A set's `kind` says how
// a published row becomes (x, FLOPs, seconds):
//   gemm          columns m, n, k and flops_per_s or seconds: F = 2 m n k, x = min(m, n, k)
//   grouped_gemm  columns rows_per_group, groups, n, k and flops_per_s or seconds:
//                 F = 2 rows groups n k, x = rows per group
//   attention     columns seq and flops_per_s or seconds, with heads, head_dim (head_dim_v,
//                 default head_dim), tokens (a fixed batch x seq) or batch (a fixed number of
//                 sequences; neither: batch 1), causal, phase
//                 (forward | backward): F = 2 b seq heads (head_dim + head_dim_v) keys, keys =
//                 (seq + 1) / 2 causal or seq, doubled for a backward (the cost model's counts,
//                 docs/modelling.md); x = seq. A published throughput is turned into a time with the
//                 publisher's count: forward 2 b seq^2 heads (head_dim + head_dim_v) (/ 2 causal),
//                 times backward_flops_counted (FlashAttention's benchmarks count a backward as 2.5
//                 forwards) for a backward.
// x = seq stands for the cost model's query rows of one micro-batch: the published attention
// benchmarks vary the sequence at a fixed batch x sequence, so the fitted curve is exact for
// micro-batches of one sequence.
// Constants are single measured or published ratios, value / of: a collective's bus bandwidth over
// its link's, or memory-bound kernels' bandwidth over the HBM peak.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/json_input.hpp"
#include "cost/efficiency_fit.hpp"
#include "hardware/hardware_spec.hpp"

namespace moesim {

struct KernelPointSource {
  std::string title, url, locator, conditions;
};

struct KernelPointSet {
  std::string source;  // a key of KernelPointsFile::sources
  std::vector<KernelPoint> points;
};

// The residuals the fit had when the hardware file was last set (the file's `recorded`; the fitted
// max and half_at themselves are in the hardware file).
struct RecordedFit {
  double rms_error = 0, max_abs_error = 0;
};

struct CurveFitSpec {
  std::string hardware;  // a hardware file name ("h100-hgx")
  std::string curve;     // gemm | gemm_fp8 | grouped_gemm | attention | attention_backward | linear_attention
  Dtype dtype = Dtype::bf16;
  std::vector<KernelPointSet> sets;
  std::optional<RecordedFit> recorded;

  std::vector<KernelPoint> points() const;  // every set's, in order
};

struct EfficiencyConstant {
  std::string hardware;
  std::string field;  // collective | collective_scale_out | memory | memory_by_kind.<MemoryKindsSpec kind>
  std::string source;
  double value_bytes_per_s = 0;  // the bus bandwidth, or the kernels' memory bandwidth, reached
  double link_bytes_per_s = 0;   // the link it runs over (each way), or the HBM peak

  double efficiency() const { return value_bytes_per_s / link_bytes_per_s; }
};

struct KernelPointsFile {
  std::map<std::string, KernelPointSource> sources;
  std::vector<CurveFitSpec> fits;
  std::vector<EfficiencyConstant> constants;
};

// Throws InputError (file and JSON path) on anything malformed: unknown keys, missing columns,
// a set naming no source, non-positive numbers.
KernelPointsFile load_kernel_points(const InputText& input);

// The named curve of an efficiency block; nullopt for an absent optional curve. Throws
// std::invalid_argument for a name that is no curve (the loader admits only curve names).
std::optional<EfficiencyCurve> curve_named(const EfficiencySpec& e, std::string_view curve);
// The named efficiency constant, as the cost model resolves it (collective_scale_out defaults
// to collective).
double constant_named(const EfficiencySpec& e, std::string_view field);

}  // namespace moesim
