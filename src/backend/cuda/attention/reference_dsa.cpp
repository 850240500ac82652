// SPDX-License-Identifier: MIT
// DSA CPU references: lightning indexer scores (and their gradient) and sparse MQA attention over
// selected latents, in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/attention/reference.hpp"

namespace moesim::cuda::ref {

void dsa_indexer(const DsaIndexerShape& s, In q, In k, In w, Out scores) {
  const int64_t T = s.seq, Hi = s.heads, di = s.head_dim;
  std::fill(scores.begin(), scores.end(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t x = 0; x <= t; ++x) {
        double acc = 0;
        for (int64_t j = 0; j < Hi; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < di; ++c) dot += q[((b * T + t) * Hi + j) * di + c] * k[(b * T + x) * di + c];
          acc += w[(b * T + t) * Hi + j] * std::max(dot, 0.0);
        }
        scores[(b * T + t) * T + x] = acc;
      }
    }
  }
}

void dsa_indexer_backward(const DsaIndexerShape& s, In q, In k, In w, In d_scores, Out dq, Out dk, Out dw) {
  const int64_t T = s.seq, Hi = s.heads, di = s.head_dim;
  std::fill(dq.begin(), dq.end(), 0.0);
  std::fill(dk.begin(), dk.end(), 0.0);
  std::fill(dw.begin(), dw.end(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t x = 0; x <= t; ++x) {
        const double gs = d_scores[(b * T + t) * T + x];
        for (int64_t j = 0; j < Hi; ++j) {
          const int64_t qi = ((b * T + t) * Hi + j) * di, ki = (b * T + x) * di;
          double dot = 0;
          for (int64_t c = 0; c < di; ++c) dot += q[qi + c] * k[ki + c];
          if (dot <= 0) continue;  // ReLU: no gradient through a non-positive dot
          const double wj = w[(b * T + t) * Hi + j];
          dw[(b * T + t) * Hi + j] += gs * dot;
          for (int64_t c = 0; c < di; ++c) {
            dq[qi + c] += gs * wj * k[ki + c];
            dk[ki + c] += gs * wj * q[qi + c];
          }
        }
      }
    }
  }
}

namespace {

// Probabilities over the selected keys of query (b, t), head h; slots with idx -1 get 0.
double sparse_probs(const DsaAttentionShape& s, In q, In kv, std::span<const int32_t> idx, double scale, int64_t b,
                    int64_t t, int64_t h, std::vector<double>& p) {
  const int64_t dq = s.latent + s.rope;
  const int64_t qi = ((b * s.seq + t) * s.heads + h) * dq;
  const int32_t* sel = &idx[static_cast<size_t>((b * s.seq + t) * s.top_k)];
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < s.top_k; ++j) {
    if (sel[j] < 0) continue;
    const int64_t ki = (b * s.seq + sel[j]) * dq;
    double acc = 0;
    for (int64_t c = 0; c < dq; ++c) acc += q[qi + c] * kv[ki + c];
    p[static_cast<size_t>(j)] = scale * acc;
    m = std::max(m, p[static_cast<size_t>(j)]);
  }
  double l = 0;
  for (int64_t j = 0; j < s.top_k; ++j) {
    if (sel[j] >= 0) l += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - m));
  }
  for (int64_t j = 0; j < s.top_k; ++j) p[static_cast<size_t>(j)] = sel[j] >= 0 ? p[static_cast<size_t>(j)] / l : 0.0;
  return m + std::log(l);
}

}  // namespace

void dsa_sparse_forward(const DsaAttentionShape& s, In q, In kv, std::span<const int32_t> idx, double scale, Out o,
                        Out lse) {
  std::vector<double> p(static_cast<size_t>(s.top_k));
  const int64_t dq = s.latent + s.rope;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq; ++t) {
      const int32_t* sel = &idx[static_cast<size_t>((b * s.seq + t) * s.top_k)];
      for (int64_t h = 0; h < s.heads; ++h) {
        lse[(b * s.seq + t) * s.heads + h] = sparse_probs(s, q, kv, idx, scale, b, t, h, p);
        const int64_t oi = ((b * s.seq + t) * s.heads + h) * s.latent;
        for (int64_t d = 0; d < s.latent; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < s.top_k; ++j) {
            if (sel[j] >= 0) acc += p[static_cast<size_t>(j)] * kv[(b * s.seq + sel[j]) * dq + d];
          }
          o[oi + d] = acc;
        }
      }
    }
  }
}

void dsa_sparse_backward(const DsaAttentionShape& s, In q, In kv, std::span<const int32_t> idx, In d_o, double scale,
                         Out dq, Out dkv) {
  std::fill(dq.begin(), dq.end(), 0.0);
  std::fill(dkv.begin(), dkv.end(), 0.0);
  std::vector<double> p(static_cast<size_t>(s.top_k)), dp(static_cast<size_t>(s.top_k));
  const int64_t dqk = s.latent + s.rope;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq; ++t) {
      const int32_t* sel = &idx[static_cast<size_t>((b * s.seq + t) * s.top_k)];
      for (int64_t h = 0; h < s.heads; ++h) {
        sparse_probs(s, q, kv, idx, scale, b, t, h, p);
        const int64_t qi = (b * s.seq + t) * s.heads + h;
        double pdp = 0;
        for (int64_t j = 0; j < s.top_k; ++j) {
          if (sel[j] < 0) continue;
          const int64_t ki = (b * s.seq + sel[j]) * dqk;
          double acc = 0;
          for (int64_t d = 0; d < s.latent; ++d) {
            acc += d_o[qi * s.latent + d] * kv[ki + d];
            dkv[ki + d] += p[static_cast<size_t>(j)] * d_o[qi * s.latent + d];  // value path
          }
          dp[static_cast<size_t>(j)] = acc;
          pdp += p[static_cast<size_t>(j)] * acc;
        }
        for (int64_t j = 0; j < s.top_k; ++j) {
          if (sel[j] < 0) continue;
          const double dsj = p[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - pdp) * scale;
          const int64_t ki = (b * s.seq + sel[j]) * dqk;
          for (int64_t c = 0; c < dqk; ++c) {
            dq[qi * dqk + c] += dsj * kv[ki + c];
            dkv[ki + c] += dsj * q[qi * dqk + c];  // key path
          }
        }
      }
    }
  }
}

}  // namespace moesim::cuda::ref
