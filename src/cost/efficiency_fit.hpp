// SPDX-License-Identifier: MIT
// Fitting an efficiency curve (EfficiencyCurve, hardware_spec.hpp) to measured kernels.
//
// What it is: the least-squares fit of `max` and `half_at` to kernel timings, under the cost model's
// own kernel time (cost_model.hpp) for a compute-bound kernel of F FLOPs at size measure x:
//
//   t(x) = F / (P max x / (x + half_at)) + L = (F / P) (a + b / x) + L,   a = 1 / max, b = half_at / max
//
// with P the device's peak and L its launch overhead. t is linear in (a, b), so the fit minimising
// the relative time error sum_i ((t(x_i) - t_i) / t_i)^2 is a linear least-squares problem, solved
// with Eigen (column-pivoting Householder QR). Relative errors weigh a 5 us kernel like a 5 ms one.
//
// Constraints: half_at >= 0 (a negative fit is refitted with half_at = 0, a constant), and max is
// capped at the highest efficiency any point reaches, (F / (t - L)) / P: the curve never predicts more
// than the best measurement shows, and a curve fitted to small, latency-bound kernels cannot run away
// towards the peak (OpenXLA's H100 table alone gives max 0.998, above the 0.80 any H100 GEMM is
// published to reach). When the cap binds, half_at is refitted with max fixed.
//
// Use it for: turning published or measured kernel throughputs into hardware-file curves
// (hardware/efficiency/kernel-points.json, tools/fit_efficiency.cpp, the test that checks the
// shipped files). Caveat: the curve's size measure is one number (min(m, n, k) for GEMMs), so shapes
// with the same measure but very different total work (256 x 256 x 256 against 256 x 4096 x 4096)
// cannot both fit; the residuals say how far they miss.
#pragma once

#include <span>
#include <vector>

#include "hardware/hardware_spec.hpp"

namespace moesim {

// One measured kernel: its size measure on the curve, the FLOPs the cost model counts for it, and
// the measured time of one call.
struct KernelPoint {
  double x = 0;
  double flops = 0;
  double seconds = 0;
};

struct CurveFit {
  EfficiencyCurve curve;
  bool max_capped = false;         // the cap (best measured efficiency) set max
  double cap = 0;                  // that best measured efficiency
  std::vector<double> residuals;   // (t(x_i) - t_i) / t_i, one per point, in input order
  double rms_error = 0;            // root mean square of the residuals
  double max_abs_error = 0;        // largest |residual|
};

// The cost model's time of `p` on `curve` (compute-bound: the memory term is not modelled here).
double curve_seconds(const EfficiencyCurve& curve, const KernelPoint& p, double peak_flops_per_s, double launch_s);

// The fit described above; `cap_at_best` false leaves max unconstrained (for tests of the solve).
// Requires at least one point with seconds > launch_s; throws std::invalid_argument otherwise (a
// caller's bug: the points are checked when they are read).
CurveFit fit_efficiency_curve(std::span<const KernelPoint> points, double peak_flops_per_s, double launch_s,
                              bool cap_at_best = true);

}  // namespace moesim
