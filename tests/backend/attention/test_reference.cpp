// SPDX-License-Identifier: MIT
// CPU only: the attention references' backward passes against central finite differences of their
// forward passes (double), on small shapes; and the cost functions against the figures of
// docs/modelling.md.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <functional>
#include <span>
#include <stdexcept>

#include "backend/cuda/attention/reference.hpp"
#include "../test_util.hpp"

#if MOESIM_HAVE_CUDNN
#include "backend/cuda/attention/cudnn_lib.hpp"
#endif

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

// Central differences of loss(x) = sum(f(x) * r) at every element of x; compares with `analytic`.
// Step 1e-5 in double: truncation ~1e-10, rounding ~1e-11 relative, so 1e-6 is a safe bound.
ErrorReport fd_check(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& loss) {
  std::vector<double> numeric(x.size());
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    numeric[i] = (lp - lm) / (2 * h);
  }
  return error_norms(analytic, numeric);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

constexpr double kFdTol = 1e-6;

}  // namespace

TEST_CASE("KDA reference backward matches finite differences") {
  const KdaShape s{.batch = 2, .seq = 9, .heads = 2, .head_dim_k = 5, .head_dim_v = 4};
  const auto nk = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_k);
  const auto nv = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_v);
  const auto nt = static_cast<size_t>(s.batch * s.seq * s.heads);
  auto q = normal(nk), k = normal(nk), v = normal(nv), d_o = normal(nv);
  l2_normalise_rows(q, 5);
  l2_normalise_rows(k, 5);
  auto g = uniform(nk, -2.0, -0.01), beta = uniform(nt, 0.05, 0.95);
  const double scale = 0.7;
  std::vector<double> o(nv), dq(nk), dk(nk), dv(nv), dg(nk), db(nt);
  ref::kda_backward(s, q, k, v, g, beta, d_o, scale, dq, dk, dv, dg, db);
  auto loss = [&] {
    ref::kda_forward(s, q, k, v, g, beta, scale, o);
    return dot(o, d_o);
  };
  const struct {
    std::string name;
    std::vector<double>* x;
    std::vector<double>* grad;
  } cases[] = {{"q", &q, &dq}, {"k", &k, &dk}, {"v", &v, &dv}, {"g", &g, &dg}, {"beta", &beta, &db}};
  for (const auto& c : cases) {
    const auto r = fd_check(*c.x, *c.grad, loss);
    INFO(c.name << ": " << r.str());
    CHECK(within(r, kFdTol));
  }
}

TEST_CASE("KDA reference forward: a beta = 1, no-decay step writes v exactly") {
  // With alpha = 1 and beta = 1 the delta rule replaces the value stored under key k by v, so
  // o_t = S_t^T k_t = v_t when q_t = k_t (unit norm): a closed form independent of the history.
  const KdaShape s{.batch = 1, .seq = 6, .heads = 1, .head_dim_k = 4, .head_dim_v = 3};
  auto k = normal(24), v = normal(18);
  l2_normalise_rows(k, 4);
  std::vector<double> g(24, 0.0), beta(6, 1.0), o(18);
  ref::kda_forward(s, k, k, v, g, beta, 1.0, o);
  for (size_t i = 0; i < o.size(); ++i) CHECK(o[i] == doctest::Approx(v[i]).epsilon(1e-12));
}

TEST_CASE("MLA reference backward matches finite differences") {
  const MlaShape s{.batch = 2, .seq = 7, .heads = 2, .head_dim_qk = 6, .head_dim_v = 5};
  const auto nq = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_qk);
  const auto nv = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_v);
  auto q = normal(nq), k = normal(nq), v = normal(nv), d_o = normal(nv);
  const double scale = 0.4;
  std::vector<double> o(nv), lse(static_cast<size_t>(s.batch * s.heads * s.seq)), dq(nq), dk(nq), dv(nv);
  ref::mla_backward(s, q, k, v, d_o, scale, dq, dk, dv);
  auto loss = [&] {
    ref::mla_forward(s, q, k, v, scale, o, lse);
    return dot(o, d_o);
  };
  for (auto [name, x, grad] : {std::tuple{std::string("q"), &q, &dq}, std::tuple{std::string("k"), &k, &dk},
                               std::tuple{std::string("v"), &v, &dv}}) {
    const auto r = fd_check(*x, *grad, loss);
    INFO(name << ": " << r.str());
    CHECK(within(r, kFdTol));
  }
  // The first query sees only key 0: its output is v_0.
  ref::mla_forward(s, q, k, v, scale, o, lse);
  for (int d = 0; d < 5; ++d) CHECK(o[static_cast<size_t>(d)] == doctest::Approx(v[static_cast<size_t>(d)]));
}

TEST_CASE("GQA reference: backward matches finite differences and equals MHA over repeated key/value heads") {
  const SdpaShape s{.batch = 2, .seq = 6, .heads_q = 4, .heads_kv = 2, .head_dim_qk = 5, .head_dim_v = 3};
  const auto nq = static_cast<size_t>(s.batch * s.seq * s.heads_q * s.head_dim_qk);
  const auto nk = static_cast<size_t>(s.batch * s.seq * s.heads_kv * s.head_dim_qk);
  const auto nv = static_cast<size_t>(s.batch * s.seq * s.heads_kv * s.head_dim_v);
  const auto no = static_cast<size_t>(s.batch * s.seq * s.heads_q * s.head_dim_v);
  const auto nl = static_cast<size_t>(s.batch * s.seq * s.heads_q);
  auto q = normal(nq), k = normal(nk), v = normal(nv), d_o = normal(no);
  const double scale = 0.45;
  std::vector<double> o(no), lse(nl), dq(nq), dk(nk), dv(nv);
  ref::sdpa_backward(s, q, k, v, d_o, scale, dq, dk, dv);
  auto loss = [&] {
    ref::sdpa_forward(s, q, k, v, scale, o, lse);
    return dot(o, d_o);
  };
  for (auto [name, x, grad] : {std::tuple{std::string("q"), &q, &dq}, std::tuple{std::string("k"), &k, &dk},
                               std::tuple{std::string("v"), &v, &dv}}) {
    const auto r = fd_check(*x, *grad, loss);
    INFO(name << ": " << r.str());
    CHECK(within(r, kFdTol));
  }
  // The same attention as MHA with key/value head g copied to query heads 2g and 2g + 1: equal
  // outputs and lse, equal dq, and the GQA dk, dv are the sums of each pair's MHA gradients.
  const MlaShape m{
      .batch = s.batch, .seq = s.seq, .heads = s.heads_q, .head_dim_qk = s.head_dim_qk, .head_dim_v = s.head_dim_v};
  auto expand = [&](const std::vector<double>& x, int64_t dim) {
    std::vector<double> y(static_cast<size_t>(s.batch * s.seq * s.heads_q * dim));
    for (int64_t r = 0; r < s.batch * s.seq; ++r)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t c = 0; c < dim; ++c)
          y[static_cast<size_t>((r * s.heads_q + h) * dim + c)] =
              x[static_cast<size_t>((r * s.heads_kv + h / 2) * dim + c)];
    return y;
  };
  const auto k_full = expand(k, s.head_dim_qk), v_full = expand(v, s.head_dim_v);
  std::vector<double> o_m(no), lse_m(nl), dq_m(nq), dk_m(nq), dv_m(no);
  ref::sdpa_forward(s, q, k, v, scale, o, lse);
  ref::mla_forward(m, q, k_full, v_full, scale, o_m, lse_m);
  ref::mla_backward(m, q, k_full, v_full, d_o, scale, dq_m, dk_m, dv_m);
  CHECK(error_norms(o, o_m).max_rel < 1e-14);
  CHECK(error_norms(lse, lse_m).max_rel < 1e-14);
  CHECK(error_norms(dq, dq_m).max_rel < 1e-12);
  auto fold = [&](const std::vector<double>& x, int64_t dim) {
    std::vector<double> y(static_cast<size_t>(s.batch * s.seq * s.heads_kv * dim), 0.0);
    for (int64_t r = 0; r < s.batch * s.seq; ++r)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t c = 0; c < dim; ++c)
          y[static_cast<size_t>((r * s.heads_kv + h / 2) * dim + c)] +=
              x[static_cast<size_t>((r * s.heads_q + h) * dim + c)];
    return y;
  };
  CHECK(error_norms(dk, fold(dk_m, s.head_dim_qk)).max_rel < 1e-12);
  CHECK(error_norms(dv, fold(dv_m, s.head_dim_v)).max_rel < 1e-12);
}

TEST_CASE("SDPA refuses shapes cuDNN's fused attention does not take, saying why") {
  CHECK_FALSE(sdpa_shape_supported(SdpaShape{.seq = 8, .heads_q = 6, .heads_kv = 4}));
  CHECK_THROWS_WITH_AS(sdpa_check_shape(SdpaShape{.seq = 8, .heads_q = 6, .heads_kv = 4}),
                       doctest::Contains("multiple of heads_kv"), std::invalid_argument);
  CHECK_FALSE(sdpa_shape_supported(SdpaShape{.seq = 8, .heads_q = 4, .heads_kv = 4, .head_dim_qk = 100}));
  CHECK_FALSE(sdpa_shape_supported(SdpaShape{.seq = 8, .heads_q = 4, .heads_kv = 4, .head_dim_v = 512}));
  CHECK_FALSE(sdpa_shape_supported(SdpaShape{.seq = 1, .heads_q = 4, .heads_kv = 4}));
  CHECK_FALSE(sdpa_backward_supported(SdpaShape{.seq = 8, .heads_q = 6, .heads_kv = 4}));
  CHECK(sdpa_shape_supported(SdpaShape{.seq = 8, .heads_q = 64, .heads_kv = 8}));
  CHECK(sdpa_shape_supported(SdpaShape{.seq = 8192, .heads_q = 96, .heads_kv = 96, .head_dim_qk = 192}));
  // The backward's scratch: FP32 row sums (padded to 256 bytes) then the FP32 dq accumulator.
  const SdpaShape small{.batch = 2, .seq = 100, .heads_q = 3, .heads_kv = 1, .head_dim_qk = 64};
  CHECK(sdpa_backward_scratch_bytes(small) == 2560 + 600 * 64 * 4);
}

#if MOESIM_HAVE_CUDNN
TEST_CASE("a missing cuDNN library is reported with its path and what to do") {
  cudnn::CudnnApi api;
  std::string why;
  CHECK_FALSE(cudnn::load_cudnn("/nonexistent/libcudnn.so.9", api, why));
  CHECK(why.find("cannot load /nonexistent/libcudnn.so.9") != std::string::npos);
  CHECK(why.find("MOESIM_CUDNN_LIBRARY") != std::string::npos);
  CHECK(api.version == 0);  // nothing filled in
}
#endif

TEST_CASE("DSA references: indexer and sparse attention backward match finite differences") {
  SUBCASE("indexer") {
    const DsaIndexerShape s{.batch = 1, .seq = 6, .heads = 3, .head_dim = 4, .top_k = 3};
    auto q = normal(6 * 3 * 4), k = normal(6 * 4), w = uniform(6 * 3, -1, 1), ds = normal(36);
    std::vector<double> sc(36), dq(q.size()), dk(k.size()), dw(w.size());
    ref::dsa_indexer_backward(s, q, k, w, ds, dq, dk, dw);
    auto loss = [&] {
      ref::dsa_indexer(s, q, k, w, sc);
      return dot(sc, ds);
    };
    // Random dots sit far from ReLU's kink at 0 compared with the 1e-5 step (almost surely).
    for (auto [name, x, grad] : {std::tuple{std::string("q"), &q, &dq}, std::tuple{std::string("k"), &k, &dk},
                                 std::tuple{std::string("w"), &w, &dw}}) {
      const auto r = fd_check(*x, *grad, loss);
      INFO(name << ": " << r.str());
      CHECK(within(r, kFdTol));
    }
  }
  SUBCASE("sparse attention") {
    const DsaAttentionShape s{.batch = 2, .seq = 8, .heads = 2, .latent = 6, .rope = 3, .top_k = 4};
    std::vector<int32_t> idx(static_cast<size_t>(s.batch * s.seq * s.top_k), -1);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t t = 0; t < s.seq; ++t) {
        std::vector<int32_t> keys(static_cast<size_t>(t + 1));
        for (int32_t j = 0; j <= t; ++j) keys[static_cast<size_t>(j)] = j;
        std::shuffle(keys.begin(), keys.end(), rng());
        for (int64_t j = 0; j < std::min<int64_t>(t + 1, s.top_k); ++j) {
          idx[static_cast<size_t>((b * s.seq + t) * s.top_k + j)] = keys[static_cast<size_t>(j)];
        }
      }
    }
    const auto nq = static_cast<size_t>(s.batch * s.seq * s.heads * 9);
    const auto no = static_cast<size_t>(s.batch * s.seq * s.heads * 6);
    auto q = normal(nq), kv = normal(static_cast<size_t>(s.batch * s.seq * 9)), d_o = normal(no);
    std::vector<double> o(no), lse(static_cast<size_t>(s.batch * s.seq * s.heads)), dq(nq), dkv(kv.size());
    ref::dsa_sparse_backward(s, q, kv, idx, d_o, 0.5, dq, dkv);
    auto loss = [&] {
      ref::dsa_sparse_forward(s, q, kv, idx, 0.5, o, lse);
      return dot(o, d_o);
    };
    for (auto [name, x, grad] : {std::tuple{std::string("q"), &q, &dq}, std::tuple{std::string("kv"), &kv, &dkv}}) {
      const auto r = fd_check(*x, *grad, loss);
      INFO(name << ": " << r.str());
      CHECK(within(r, kFdTol));
    }
  }
}

TEST_CASE("cost functions reproduce docs/modelling.md's figures for K3") {
  // KDA: about 12.2 MFLOP per token per layer (96 heads, dh 128, C 64).
  const KdaShape kda{.batch = 1, .seq = 8192, .heads = 96};
  CHECK(kda_forward_cost(kda).flops / 8192 == doctest::Approx(12.19e6).epsilon(1e-3));
  CHECK(kda_backward_cost(kda).flops == doctest::Approx(2 * kda_forward_cost(kda).flops));
  // Sparse attention with 96 heads: 428 MFLOP per query once every query keeps 2048 keys.
  const DsaAttentionShape a{.batch = 1, .seq = 1 << 20, .heads = 96, .top_k = 2048};
  const double per_query = dsa_sparse_forward_cost(a).flops / static_cast<double>(a.seq);
  CHECK(per_query == doctest::Approx(2.0 * 96 * 2048 * 1088).epsilon(2e-3));
  CHECK(per_query / 1e6 == doctest::Approx(428).epsilon(2e-3));
  // Indexer: 2 * 64 * 128 FLOP per causal pair; dense MLA: 2 * H * (192 + 128) per pair.
  const DsaIndexerShape ix{.batch = 1, .seq = 100};
  CHECK(dsa_indexer_cost(ix).flops == doctest::Approx(2.0 * 64 * 128 * 5050));
  const MlaShape m{.batch = 1, .seq = 100, .heads = 96};
  CHECK(mla_forward_cost(m).flops == doctest::Approx(2.0 * 96 * 320 * 5050));
  // SDPA charges the same per pair, with query heads (GQA's fewer key/value heads change bytes only).
  const SdpaShape g{.batch = 1, .seq = 100, .heads_q = 96, .heads_kv = 8, .head_dim_qk = 192, .head_dim_v = 128};
  CHECK(sdpa_forward_cost(g).flops == doctest::Approx(mla_forward_cost(m).flops));
  CHECK(sdpa_backward_cost(g).flops == doctest::Approx(2 * sdpa_forward_cost(g).flops));
  CHECK(causal_pairs(10, 4) == doctest::Approx(4 + 3 + 2 + 1 + 6 * 4));
}
