// SPDX-License-Identifier: MIT
// KDA CPU reference: the gated delta rule token by token, in double.
#include <cmath>
#include <vector>

#include "backend/cuda/attention/reference.hpp"

namespace moesim::cuda::ref {
namespace {

struct Dims {
  int64_t B, T, H, dk, dv;
  int64_t tok(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
};

}  // namespace

void kda_forward(const KdaShape& s, In q, In k, In v, In g, In beta, double scale, Out o) {
  const Dims d{s.batch, s.seq, s.heads, s.head_dim_k, s.head_dim_v};
  std::vector<double> st(static_cast<size_t>(d.dk * d.dv));
  std::vector<double> p(static_cast<size_t>(d.dv));
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      std::fill(st.begin(), st.end(), 0.0);
      for (int64_t t = 0; t < d.T; ++t) {
        const int64_t x = d.tok(b, t, h);
        // S' = Diag(alpha) S; p = S'^T k; delta = beta (v - p); S = S' + k delta^T; o = scale S^T q
        std::fill(p.begin(), p.end(), 0.0);
        for (int64_t c = 0; c < d.dk; ++c) {
          const double a = std::exp(g[x * d.dk + c]);
          for (int64_t j = 0; j < d.dv; ++j) {
            st[c * d.dv + j] *= a;
            p[j] += st[c * d.dv + j] * k[x * d.dk + c];
          }
        }
        for (int64_t j = 0; j < d.dv; ++j) {
          const double delta = beta[x] * (v[x * d.dv + j] - p[j]);
          double acc = 0;
          for (int64_t c = 0; c < d.dk; ++c) {
            st[c * d.dv + j] += k[x * d.dk + c] * delta;
            acc += st[c * d.dv + j] * q[x * d.dk + c];
          }
          o[x * d.dv + j] = scale * acc;
        }
      }
    }
  }
}

void kda_backward(const KdaShape& s, In q, In k, In v, In g, In beta, In d_o, double scale, Out dq, Out dk, Out dv,
                  Out dg, Out dbeta) {
  const Dims d{s.batch, s.seq, s.heads, s.head_dim_k, s.head_dim_v};
  const auto sdim = static_cast<size_t>(d.dk * d.dv);
  std::vector<double> sp(static_cast<size_t>(d.T) * sdim);  // S'_t for every t
  std::vector<double> delta(static_cast<size_t>(d.T * d.dv)), vp(static_cast<size_t>(d.T * d.dv));
  std::vector<double> st(sdim), ds(sdim), dd(static_cast<size_t>(d.dv));
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      std::fill(st.begin(), st.end(), 0.0);
      for (int64_t t = 0; t < d.T; ++t) {
        const int64_t x = d.tok(b, t, h);
        double* spt = &sp[static_cast<size_t>(t) * sdim];
        for (int64_t c = 0; c < d.dk; ++c) {
          const double a = std::exp(g[x * d.dk + c]);
          for (int64_t j = 0; j < d.dv; ++j) spt[c * d.dv + j] = a * st[c * d.dv + j];
        }
        for (int64_t j = 0; j < d.dv; ++j) {
          double p = 0;
          for (int64_t c = 0; c < d.dk; ++c) p += spt[c * d.dv + j] * k[x * d.dk + c];
          vp[t * d.dv + j] = v[x * d.dv + j] - p;
          delta[t * d.dv + j] = beta[x] * vp[t * d.dv + j];
          for (int64_t c = 0; c < d.dk; ++c)
            st[c * d.dv + j] = spt[c * d.dv + j] + k[x * d.dk + c] * delta[t * d.dv + j];
        }
      }
      std::fill(ds.begin(), ds.end(), 0.0);
      for (int64_t t = d.T - 1; t >= 0; --t) {
        const int64_t x = d.tok(b, t, h);
        const double* spt = &sp[static_cast<size_t>(t) * sdim];
        const double* dl = &delta[static_cast<size_t>(t * d.dv)];
        const double bt = beta[x];
        // o = scale S_t^T q with S_t = S' + k delta^T
        for (int64_t c = 0; c < d.dk; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < d.dv; ++j) {
            ds[c * d.dv + j] += scale * q[x * d.dk + c] * d_o[x * d.dv + j];
            acc += (spt[c * d.dv + j] + k[x * d.dk + c] * dl[j]) * d_o[x * d.dv + j];
          }
          dq[x * d.dk + c] = scale * acc;
        }
        double db = 0;
        for (int64_t j = 0; j < d.dv; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < d.dk; ++c) acc += ds[c * d.dv + j] * k[x * d.dk + c];
          dd[static_cast<size_t>(j)] = acc;  // d delta
          db += acc * vp[t * d.dv + j];
          dv[x * d.dv + j] = bt * acc;
        }
        dbeta[x] = db;
        for (int64_t c = 0; c < d.dk; ++c) {
          const double a = std::exp(g[x * d.dk + c]);
          double dkc = 0, dgc = 0;
          for (int64_t j = 0; j < d.dv; ++j) {
            const double dp = -bt * dd[static_cast<size_t>(j)];
            dkc += ds[c * d.dv + j] * dl[j] + spt[c * d.dv + j] * dp;
            const double dsp = ds[c * d.dv + j] + k[x * d.dk + c] * dp;
            dgc += dsp * spt[c * d.dv + j];
            ds[c * d.dv + j] = a * dsp;
          }
          dk[x * d.dk + c] = dkc;
          dg[x * d.dk + c] = dgc;
        }
      }
    }
  }
}

}  // namespace moesim::cuda::ref
