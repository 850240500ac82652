// SPDX-License-Identifier: MIT
// DSA kernels (indexer and its gradient, top-k, sparse attention forward and backward) against
// the CPU references (needs a GPU; exit 77 otherwise).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "backend/cuda/attention/dsa.hpp"
#include "backend/cuda/attention/reference.hpp"
#include "backend/cuda/buffer.hpp"
#include "../gpu_test_util.hpp"
#include "../test_util.hpp"

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

// Indexer scores and gradients are FP32 sums of BF16 products: 1e-5 relative to the largest entry.
// Sparse attention as MLA: BF16 output, gradients through D = rowsum(dO * O) with BF16 o.
constexpr double kScoreTol = 1e-5;
constexpr double kOutTol = 2.0 / 256;
constexpr double kGradTol = 4.0 / 256;

// Checks one query's top-k list against exact scores: right count of valid entries first, -1
// after, no duplicates, causal, and the set is a top-k set (nothing left out scores above
// anything kept, up to `slack`).
bool topk_ok(const int32_t* sel, int64_t t, int64_t K, const double* row, double slack, std::string& why) {
  const int64_t n = std::min<int64_t>(t + 1, K);
  std::set<int32_t> kept;
  for (int64_t j = 0; j < K; ++j) {
    if (j < n) {
      if (sel[j] < 0 || sel[j] > t) return why = "invalid index", false;
      if (!kept.insert(sel[j]).second) return why = "duplicate", false;
    } else if (sel[j] != -1) {
      return why = "padding not -1", false;
    }
  }
  double min_kept = INFINITY, max_left = -INFINITY;
  for (int64_t x = 0; x <= t; ++x) {
    if (kept.count(static_cast<int32_t>(x))) {
      min_kept = std::min(min_kept, row[x]);
    } else {
      max_left = std::max(max_left, row[x]);
    }
  }
  if (max_left > min_kept + slack) return why = "a better key left out", false;
  return true;
}

}  // namespace

TEST_CASE("DSA lightning indexer, its gradient and top-k match the CPU reference") {
  // 12 heads: a partial group of 8 in the tensor-core backward.
  const DsaIndexerShape s{.batch = 2, .seq = 150, .heads = 12, .head_dim = 128, .top_k = 48};
  const int64_t T = s.seq;
  const auto nq = static_cast<size_t>(s.batch * T * s.heads * s.head_dim);
  const auto nk = static_cast<size_t>(s.batch * T * s.head_dim);
  const auto nw = static_cast<size_t>(s.batch * T * s.heads);
  const auto ns = static_cast<size_t>(s.batch * T * T);
  const auto q = to_bf16(normal(nq)), k = to_bf16(normal(nk));
  auto wd = uniform(nw, -1.0, 1.0);
  const auto w = to_f32(wd);
  auto gq = to_device<bf16_bits>(q.bits), gk = to_device<bf16_bits>(k.bits);
  auto gw = to_device<float>(w);
  DeviceBuffer<float> scores(ns);
  std::vector<double> sc_ref(ns);
  ref::dsa_indexer(s, q.vals, k.vals, wd, sc_ref);
  std::vector<double> sc_gpu;
  // SIMT first, then the default (tensor cores), whose scores the top-k below uses.
  for (auto impl : {AttentionImpl::simt, AttentionImpl::tensor_core}) {
    scores.fill_bytes(0xFF);
    dsa_indexer_scores(s, gq.data(), gk.data(), gw.data(), scores.data(), nullptr, impl);
    device_sync();
    sc_gpu = widen(scores.download());
    for (int64_t b = 0; b < s.batch; ++b) {  // only the causal entries are defined
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t x = t + 1; x < T; ++x) sc_gpu[static_cast<size_t>((b * T + t) * T + x)] = 0.0;
      }
    }
    const auto r_s = error_norms(sc_gpu, sc_ref);
    MESSAGE(std::string(impl == AttentionImpl::simt ? "simt" : "tensor_core") << " scores " << r_s.str());
    CHECK(within(r_s, kScoreTol));
  }

  // Top-k on the GPU's scores: exact against those scores, and a top-k set of the exact scores
  // up to the scores' FP32 error.
  DeviceBuffer<int32_t> idx(static_cast<size_t>(s.batch * T * s.top_k));
  idx.fill_bytes(0x7F);
  dsa_topk(s, scores.data(), idx.data(), nullptr);
  device_sync();
  const auto sel = idx.download();
  double max_abs = 0;
  for (double x : sc_ref) max_abs = std::max(max_abs, std::abs(x));
  int bad = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* row_sel = &sel[static_cast<size_t>((b * T + t) * s.top_k)];
      std::string why;
      if (!topk_ok(row_sel, t, s.top_k, &sc_gpu[static_cast<size_t>((b * T + t) * T)], 0.0, why) ||
          !topk_ok(row_sel, t, s.top_k, &sc_ref[static_cast<size_t>((b * T + t) * T)], 1e-5 * max_abs, why)) {
        if (bad++ < 5) MESSAGE("top-k of query " << t << " (batch " << b << "): " << why);
      }
    }
  }
  CHECK(bad == 0);

  // Gradient of sum(scores * dI) over causal entries.
  auto dsd = normal(ns);
  const auto ds = to_f32(dsd);
  auto gds = to_device<float>(ds);
  DeviceBuffer<float> dq(nq), dk(nk), dw(nw);
  std::vector<double> rq(nq), rk(nk), rw(nw);
  ref::dsa_indexer_backward(s, q.vals, k.vals, wd, dsd, rq, rk, rw);
  for (auto impl : {AttentionImpl::tensor_core, AttentionImpl::simt}) {
    const std::string variant = impl == AttentionImpl::simt ? "simt" : "tensor_core";
    for (auto* b : {&dq, &dk, &dw}) b->fill_bytes(0xFF);
    dsa_indexer_backward(s, gq.data(), gk.data(), gw.data(), gds.data(), dq.data(), dk.data(), dw.data(), nullptr,
                         impl);
    device_sync();
    for (auto [name, got, want] : {std::tuple{std::string("dq"), &dq, &rq}, std::tuple{std::string("dk"), &dk, &rk},
                                   std::tuple{std::string("dw"), &dw, &rw}}) {
      const auto r = error_norms(widen(got->download()), *want);
      MESSAGE(variant << " indexer " << name << " " << r.str());
      CHECK(within(r, kScoreTol * 10));  // sums over up to T * Hi terms
    }
  }
}

TEST_CASE("DSA top-k keeps ties and large rows right") {
  // Many equal scores (ties at the threshold) and rows longer than the block.
  const DsaIndexerShape s{.batch = 1, .seq = 700, .heads = 1, .head_dim = 128, .top_k = 100};
  std::vector<float> sc(static_cast<size_t>(s.seq * s.seq));
  std::uniform_int_distribution<int> level(-20, 20);
  for (auto& x : sc) x = static_cast<float>(level(rng())) * 0.25f;
  auto gs = to_device<float>(sc);
  DeviceBuffer<int32_t> idx(static_cast<size_t>(s.seq * s.top_k));
  idx.fill_bytes(0x7F);
  dsa_topk(s, gs.data(), idx.data(), nullptr);
  device_sync();
  const auto sel = idx.download();
  const auto scd = widen(sc);
  int bad = 0;
  for (int64_t t = 0; t < s.seq; ++t) {
    std::string why;
    if (!topk_ok(&sel[static_cast<size_t>(t * s.top_k)], t, s.top_k, &scd[static_cast<size_t>(t * s.seq)], 0.0, why)) {
      if (bad++ < 5) MESSAGE("query " << t << ": " << why);
    }
  }
  CHECK(bad == 0);
}

namespace {

// holes: every 7th valid slot from the 4th on holds -1 (a selection the kernels must skip).
void sparse_case(const DsaAttentionShape& s, AttentionImpl impl, bool holes = false) {
  const std::string variant = impl == AttentionImpl::tensor_core ? "tensor_core" : "simt";
  INFO(variant << " T " << s.seq << " H " << s.heads << " top_k " << s.top_k << (holes ? " with -1 slots" : ""));
  const int64_t T = s.seq, dq_dim = s.latent + s.rope;
  // Random causal selections, valid slots first (the top-k kernel's contract).
  std::vector<int32_t> sel(static_cast<size_t>(s.batch * T * s.top_k), -1);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> keys(static_cast<size_t>(t + 1));
      for (int32_t j = 0; j <= t; ++j) keys[static_cast<size_t>(j)] = j;
      std::shuffle(keys.begin(), keys.end(), rng());
      for (int64_t j = 0; j < std::min<int64_t>(t + 1, s.top_k); ++j) {
        sel[static_cast<size_t>((b * T + t) * s.top_k + j)] = holes && j % 7 == 3 ? -1 : keys[static_cast<size_t>(j)];
      }
    }
  }
  const auto nq = static_cast<size_t>(s.batch * T * s.heads * dq_dim);
  const auto nkv = static_cast<size_t>(s.batch * T * dq_dim);
  const auto no = static_cast<size_t>(s.batch * T * s.heads * s.latent);
  const auto nl = static_cast<size_t>(s.batch * T * s.heads);
  const auto q = to_bf16(normal(nq)), kv = to_bf16(normal(nkv)), d_o = to_bf16(normal(no));
  const float scale = 1.0f / std::sqrt(192.0f);  // MLA's qk dim before absorption
  auto gq = to_device<bf16_bits>(q.bits), gkv = to_device<bf16_bits>(kv.bits), gdo = to_device<bf16_bits>(d_o.bits);
  auto gidx = to_device<int32_t>(sel);
  DeviceBuffer<bf16_bits> o(no);
  DeviceBuffer<float> lse(nl);
  o.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  dsa_sparse_forward(s, gq.data(), gkv.data(), gidx.data(), scale, o.data(), lse.data(), nullptr, impl);
  device_sync();
  std::vector<double> o_ref(no), lse_ref(nl);
  ref::dsa_sparse_forward(s, q.vals, kv.vals, sel, scale, o_ref, lse_ref);
  const auto r_o = error_norms(widen(o.download()), o_ref), r_l = error_norms(widen(lse.download()), lse_ref);
  MESSAGE(variant << " sparse o " << r_o.str() << "; lse " << r_l.str());
  CHECK(within(r_o, kOutTol));
  CHECK(within(r_l, kScoreTol));

  DeviceBuffer<float> dq(nq), dkv(nkv);
  DeviceBuffer<uint8_t> ws(dsa_sparse_backward_workspace_bytes(s));
  dq.fill_bytes(0xFF);
  dkv.fill_bytes(0xFF);
  ws.fill_bytes(0xFF);
  dsa_sparse_backward(s, gq.data(), gkv.data(), gidx.data(), o.data(), lse.data(), gdo.data(), scale, dq.data(),
                      dkv.data(), ws.data(), nullptr, impl);
  device_sync();
  std::vector<double> rq(nq), rkv(nkv);
  ref::dsa_sparse_backward(s, q.vals, kv.vals, sel, d_o.vals, scale, rq, rkv);
  for (auto [name, got, want] : {std::tuple{std::string("dq"), &dq, &rq}, std::tuple{std::string("dkv"), &dkv, &rkv}}) {
    const auto r = error_norms(widen(got->download()), *want);
    MESSAGE(variant << " sparse " << name << " " << r.str());
    CHECK(within(r, kGradTol));
  }
}

}  // namespace

TEST_CASE("DSA sparse attention forward and backward match the CPU reference") {
  for (auto impl : {AttentionImpl::tensor_core, AttentionImpl::simt}) {
    // top_k below, equal to and above the 64-key tile (32 keys in the backward); 32 heads, and 64
    // (two head groups).
    sparse_case(DsaAttentionShape{.batch = 2, .seq = 100, .heads = 32, .top_k = 40}, impl);
    sparse_case(DsaAttentionShape{.batch = 1, .seq = 150, .heads = 64, .top_k = 64}, impl);
    sparse_case(DsaAttentionShape{.batch = 1, .seq = 200, .heads = 32, .top_k = 100}, impl);
    // Enough tiles that every tile buffer is reused (6 forward tiles of 48, 8 backward tiles of 32).
    sparse_case(DsaAttentionShape{.batch = 1, .seq = 300, .heads = 32, .top_k = 250}, impl);
    // K3's 96 heads (three head groups per query), several key tiles, and skipped slots.
    sparse_case(DsaAttentionShape{.batch = 1, .seq = 160, .heads = 96, .top_k = 136}, impl, true);
  }
}

TEST_CASE("DSA rejects unsupported shapes") {
  CHECK_THROWS_AS(dsa_check_shape(DsaAttentionShape{.seq = 8, .heads = 24}), std::invalid_argument);
  CHECK_THROWS_AS(dsa_check_shape(DsaIndexerShape{.seq = 8, .head_dim = 64}), std::invalid_argument);
}

