// SPDX-License-Identifier: MIT
#include "cost/efficiency_fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moesim {

double curve_seconds(const EfficiencyCurve& curve, const KernelPoint& p, double peak_flops_per_s, double launch_s) {
  return p.flops / (peak_flops_per_s * curve.at(p.x)) + launch_s;
}

namespace {

// With max fixed (a = 1 / max), the least-squares b of sum_i ((c_i (a + b / x_i) + L - t_i) / t_i)^2,
// c_i = F_i / P: one unknown, closed form; clamped at 0.
double fit_b(std::span<const KernelPoint> points, double peak, double launch_s, double a) {
  double num = 0, den = 0;
  for (const KernelPoint& p : points) {
    const double c = p.flops / peak;
    const double g = c / (p.x * p.seconds);                       // d residual / d b
    const double r0 = (c * a + launch_s - p.seconds) / p.seconds;  // residual at b = 0
    num -= g * r0;
    den += g * g;
  }
  return den > 0 ? std::max(0.0, num / den) : 0.0;
}

// With b = 0, the least-squares a, likewise.
double fit_a(std::span<const KernelPoint> points, double peak, double launch_s) {
  double num = 0, den = 0;
  for (const KernelPoint& p : points) {
    const double g = p.flops / peak / p.seconds;
    num += g * (p.seconds - launch_s) / p.seconds;
    den += g * g;
  }
  return num / den;
}

}  // namespace

CurveFit fit_efficiency_curve(std::span<const KernelPoint> points, double peak, double launch_s, bool cap_at_best) {
  CurveFit out;
  for (const KernelPoint& p : points) {
    if (p.seconds > launch_s && p.flops > 0) out.cap = std::max(out.cap, p.flops / (p.seconds - launch_s) / peak);
  }
  if (points.empty() || out.cap <= 0) throw std::invalid_argument("fit_efficiency_curve: no point slower than the launch overhead");

  // Unconstrained: rows [c_i / t_i, c_i / (x_i t_i)] (a, b) = (t_i - L) / t_i.
  const auto n = static_cast<Eigen::Index>(points.size());
  Eigen::MatrixXd design(n, 2);
  Eigen::VectorXd rhs(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const KernelPoint& p = points[static_cast<size_t>(i)];
    const double c = p.flops / peak;
    design(i, 0) = c / p.seconds;
    design(i, 1) = c / (p.x * p.seconds);
    rhs(i) = (p.seconds - launch_s) / p.seconds;
  }
  double a = 0, b = 0;
  if (n >= 2) {
    const Eigen::Vector2d ab = design.colPivHouseholderQr().solve(rhs);
    a = ab(0);
    b = ab(1);
  }
  if (n < 2 || b < 0 || a <= 0) {  // one point, or no size effect in the data: a constant
    b = 0;
    a = fit_a(points, peak, launch_s);
  }
  if (cap_at_best && 1 / a > out.cap) {  // never above the best measurement
    out.max_capped = true;
    a = 1 / out.cap;
    b = fit_b(points, peak, launch_s, a);
  }
  out.curve.max = 1 / a;
  out.curve.half_at = b / a;

  double sum_sq = 0;
  out.residuals.reserve(points.size());
  for (const KernelPoint& p : points) {
    const double r = (curve_seconds(out.curve, p, peak, launch_s) - p.seconds) / p.seconds;
    out.residuals.push_back(r);
    sum_sq += r * r;
    out.max_abs_error = std::max(out.max_abs_error, std::abs(r));
  }
  out.rms_error = std::sqrt(sum_sq / static_cast<double>(points.size()));
  return out;
}

}  // namespace moesim
