// SPDX-License-Identifier: MIT
// Causal softmax attention CPU reference, in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/attention/reference.hpp"

namespace moesim::cuda::ref {
namespace {

// Softmax probabilities of query t of (b, h) over keys 0..t; returns the log-sum-exp.
double causal_probs(const MlaShape& s, In q, In k, double scale, int64_t b, int64_t h, int64_t t,
                    std::vector<double>& p) {
  const int64_t dqk = s.head_dim_qk;
  const int64_t qi = ((b * s.seq + t) * s.heads + h) * dqk;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= t; ++j) {
    const int64_t ki = ((b * s.seq + j) * s.heads + h) * dqk;
    double acc = 0;
    for (int64_t c = 0; c < dqk; ++c) acc += q[qi + c] * k[ki + c];
    p[static_cast<size_t>(j)] = scale * acc;
    m = std::max(m, p[static_cast<size_t>(j)]);
  }
  double l = 0;
  for (int64_t j = 0; j <= t; ++j) l += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - m));
  for (int64_t j = 0; j <= t; ++j) p[static_cast<size_t>(j)] /= l;
  return m + std::log(l);
}

}  // namespace

void mla_forward(const MlaShape& s, In q, In k, In v, double scale, Out o, Out lse) {
  std::vector<double> p(static_cast<size_t>(s.seq));
  const int64_t dv = s.head_dim_v;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t t = 0; t < s.seq; ++t) {
        lse[(b * s.heads + h) * s.seq + t] = causal_probs(s, q, k, scale, b, h, t, p);
        const int64_t oi = ((b * s.seq + t) * s.heads + h) * dv;
        for (int64_t d = 0; d < dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= t; ++j)
            acc += p[static_cast<size_t>(j)] * v[((b * s.seq + j) * s.heads + h) * dv + d];
          o[oi + d] = acc;
        }
      }
    }
  }
}

void mla_backward(const MlaShape& s, In q, In k, In v, In d_o, double scale, Out dq, Out dk, Out dv) {
  std::fill(dq.begin(), dq.end(), 0.0);
  std::fill(dk.begin(), dk.end(), 0.0);
  std::fill(dv.begin(), dv.end(), 0.0);
  std::vector<double> p(static_cast<size_t>(s.seq)), dp(static_cast<size_t>(s.seq));
  const int64_t dqk = s.head_dim_qk, dvd = s.head_dim_v;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t t = 0; t < s.seq; ++t) {
        causal_probs(s, q, k, scale, b, h, t, p);
        const int64_t qi = ((b * s.seq + t) * s.heads + h);
        // dP_j = dO . v_j; dS_j = P_j (dP_j - sum_i P_i dP_i)
        double pdp = 0;
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t vi = ((b * s.seq + j) * s.heads + h) * dvd;
          double acc = 0;
          for (int64_t d = 0; d < dvd; ++d) {
            acc += d_o[qi * dvd + d] * v[vi + d];
            dv[vi + d] += p[static_cast<size_t>(j)] * d_o[qi * dvd + d];
          }
          dp[static_cast<size_t>(j)] = acc;
          pdp += p[static_cast<size_t>(j)] * acc;
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double dsj = p[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - pdp) * scale;
          const int64_t ki = ((b * s.seq + j) * s.heads + h) * dqk;
          for (int64_t c = 0; c < dqk; ++c) {
            dq[qi * dqk + c] += dsj * k[ki + c];
            dk[ki + c] += dsj * q[qi * dqk + c];
          }
        }
      }
    }
  }
}

}  // namespace moesim::cuda::ref
