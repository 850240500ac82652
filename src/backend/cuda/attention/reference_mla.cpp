// SPDX-License-Identifier: MIT
// Causal softmax attention CPU reference, in double: grouped key/value heads (GQA; MHA and MLA's
// core are the case of one query head per key/value head).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/attention/reference.hpp"

namespace moesim::cuda::ref {
namespace {

// Index helpers for [B, T, H, D] tensors.
struct Layout {
  const SdpaShape& s;
  int64_t group() const { return s.heads_q / s.heads_kv; }
  int64_t q_row(int64_t b, int64_t t, int64_t h) const { return (b * s.seq + t) * s.heads_q + h; }
  int64_t kv_row(int64_t b, int64_t t, int64_t h) const { return (b * s.seq + t) * s.heads_kv + h / group(); }
};

// Softmax probabilities of query t of (b, h) over keys 0..t; returns the log-sum-exp.
double causal_probs(const Layout& l, In q, In k, double scale, int64_t b, int64_t h, int64_t t,
                    std::vector<double>& p) {
  const int64_t dqk = l.s.head_dim_qk;
  const int64_t qi = l.q_row(b, t, h) * dqk;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= t; ++j) {
    const int64_t ki = l.kv_row(b, j, h) * dqk;
    double acc = 0;
    for (int64_t c = 0; c < dqk; ++c) acc += q[qi + c] * k[ki + c];
    p[static_cast<size_t>(j)] = scale * acc;
    m = std::max(m, p[static_cast<size_t>(j)]);
  }
  double z = 0;
  for (int64_t j = 0; j <= t; ++j) z += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - m));
  for (int64_t j = 0; j <= t; ++j) p[static_cast<size_t>(j)] /= z;
  return m + std::log(z);
}

SdpaShape as_sdpa(const MlaShape& s) {
  return SdpaShape{s.batch, s.seq, s.heads, s.heads, s.head_dim_qk, s.head_dim_v};
}

}  // namespace

void sdpa_forward(const SdpaShape& s, In q, In k, In v, double scale, Out o, Out lse) {
  const Layout l{s};
  std::vector<double> p(static_cast<size_t>(s.seq));
  const int64_t dv = s.head_dim_v;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      for (int64_t t = 0; t < s.seq; ++t) {
        lse[(b * s.heads_q + h) * s.seq + t] = causal_probs(l, q, k, scale, b, h, t, p);
        const int64_t oi = l.q_row(b, t, h) * dv;
        for (int64_t d = 0; d < dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= t; ++j) acc += p[static_cast<size_t>(j)] * v[l.kv_row(b, j, h) * dv + d];
          o[oi + d] = acc;
        }
      }
    }
  }
}

void sdpa_backward(const SdpaShape& s, In q, In k, In v, In d_o, double scale, Out dq, Out dk, Out dv) {
  const Layout l{s};
  std::fill(dq.begin(), dq.end(), 0.0);
  std::fill(dk.begin(), dk.end(), 0.0);
  std::fill(dv.begin(), dv.end(), 0.0);
  std::vector<double> p(static_cast<size_t>(s.seq)), dp(static_cast<size_t>(s.seq));
  const int64_t dqk = s.head_dim_qk, dvd = s.head_dim_v;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      for (int64_t t = 0; t < s.seq; ++t) {
        causal_probs(l, q, k, scale, b, h, t, p);
        const int64_t qi = l.q_row(b, t, h);
        // dP_j = dO . v_j; dS_j = P_j (dP_j - sum_i P_i dP_i); key/value gradients summed over the group.
        double pdp = 0;
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t vi = l.kv_row(b, j, h) * dvd;
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
          const int64_t ki = l.kv_row(b, j, h) * dqk;
          for (int64_t c = 0; c < dqk; ++c) {
            dq[qi * dqk + c] += dsj * k[ki + c];
            dk[ki + c] += dsj * q[qi * dqk + c];
          }
        }
      }
    }
  }
}

void mla_forward(const MlaShape& s, In q, In k, In v, double scale, Out o, Out lse) {
  sdpa_forward(as_sdpa(s), q, k, v, scale, o, lse);
}

void mla_backward(const MlaShape& s, In q, In k, In v, In d_o, double scale, Out dq, Out dk, Out dv) {
  sdpa_backward(as_sdpa(s), q, k, v, d_o, scale, dq, dk, dv);
}

}  // namespace moesim::cuda::ref
