// SPDX-License-Identifier: MIT
#include "trace/host_fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace moesim {

HostPaceFit fit_host_pace(std::span<const HostPaceRow> rows) {
  HostPaceFit out;
  std::vector<const HostPaceRow*> used;
  for (const HostPaceRow& r : rows) {
    if (r.num_ops <= 0) continue;
    used.push_back(&r);
    out.num_ops += r.num_ops;
    out.num_kernels += r.num_kernels;
    out.host_s += r.host_s;
  }
  if (used.empty()) throw std::invalid_argument("fit_host_pace: no op");

  // Rows sqrt(n) [1, K/n] (h, c) = sqrt(n) Y/n: the weighted problem as ordinary least squares.
  const auto num_rows = static_cast<Eigen::Index>(used.size());
  Eigen::MatrixXd design(num_rows, 2);
  Eigen::VectorXd rhs(num_rows);
  double first_kernels = -1;
  out.kernel_identified = false;
  for (Eigen::Index i = 0; i < num_rows; ++i) {
    const HostPaceRow& r = *used[static_cast<size_t>(i)];
    const double w = std::sqrt(r.num_ops), kernels = r.num_kernels / r.num_ops;
    design(i, 0) = w;
    design(i, 1) = w * kernels;
    rhs(i) = w * r.host_s / r.num_ops;
    if (first_kernels < 0) first_kernels = kernels;
    if (kernels != first_kernels) out.kernel_identified = true;
  }
  const double mean_per_op = out.host_s / out.num_ops;
  double h = mean_per_op, c = 0;
  if (out.kernel_identified) {
    const Eigen::Vector2d hc = design.colPivHouseholderQr().solve(rhs);
    h = hc(0);
    c = hc(1);
    if (c < 0) {
      h = mean_per_op;
      c = 0;
    } else if (h < 0) {
      h = 0;
      c = design.col(1).dot(rhs) / design.col(1).squaredNorm();
    }
  }
  out.op_issue_s = h;
  out.kernel_issue_s = c;
  double sum_sq = 0;
  for (Eigen::Index i = 0; i < num_rows; ++i) {
    const double e = rhs(i) - design(i, 0) * h - design(i, 1) * c;
    sum_sq += e * e;
  }
  out.rms_residual_s = std::sqrt(sum_sq / out.num_ops);
  return out;
}

std::vector<HostPaceRow> host_pace_rows(const TraceMatch& m, const Program& p) {
  std::map<std::string, HostPaceRow> by_name;
  for (const Op& op : p.ops) {
    HostPaceRow& r = by_name[p.name_of(op)];
    r.num_ops += 1;
    r.num_kernels += std::max(op.num_kernels, 0);
  }
  std::vector<HostPaceRow> out;
  out.reserve(by_name.size());
  for (auto& [name, r] : by_name) {
    r.name = name;
    if (auto it = m.ops.find(name); it != m.ops.end()) r.host_s = it->second.host_s;
    out.push_back(r);
  }
  return out;
}

}  // namespace moesim
