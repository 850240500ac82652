// SPDX-License-Identifier: MIT
// MLA causal attention kernels against the CPU reference (needs a GPU; exit 77 otherwise).
#include <doctest/doctest.h>

#include <cmath>

#include "backend/cuda/attention/mla_attention.hpp"
#include "backend/cuda/attention/reference.hpp"
#include "backend/cuda/buffer.hpp"
#include "../gpu_test_util.hpp"
#include "../test_util.hpp"

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

// o is BF16 (2^-8 per element). lse is FP32 from FP32 sums (1e-5). The gradients use D =
// rowsum(dO * O) with the BF16 o, as flash attention does, so they inherit an error of BF16 size
// relative to dS: 2^-8 again, with a factor 2 for cancellation in dP - D.
constexpr double kOutTol = 2.0 / 256;
constexpr double kLseTol = 1e-5;
constexpr double kGradTol = 4.0 / 256;

void run_case(const MlaShape& s, AttentionImpl impl) {
  const std::string variant = impl == AttentionImpl::tensor_core ? "tensor_core" : "simt";
  INFO(variant << " B " << s.batch << " T " << s.seq << " H " << s.heads << " dqk " << s.head_dim_qk);
  const auto nq = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_qk);
  const auto nv = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_v);
  const auto nl = static_cast<size_t>(s.batch * s.seq * s.heads);
  const auto q = to_bf16(normal(nq)), k = to_bf16(normal(nq)), v = to_bf16(normal(nv)), d_o = to_bf16(normal(nv));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim_qk));
  auto gq = to_device<bf16_bits>(q.bits), gk = to_device<bf16_bits>(k.bits), gv = to_device<bf16_bits>(v.bits);
  auto gdo = to_device<bf16_bits>(d_o.bits);
  DeviceBuffer<bf16_bits> o(nv);
  DeviceBuffer<float> lse(nl);
  o.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  mla_forward(s, gq.data(), gk.data(), gv.data(), scale, o.data(), lse.data(), nullptr, impl);
  device_sync();
  std::vector<double> o_ref(nv), lse_ref(nl);
  ref::mla_forward(s, q.vals, k.vals, v.vals, scale, o_ref, lse_ref);
  const auto r_o = error_norms(widen(o.download()), o_ref), r_l = error_norms(widen(lse.download()), lse_ref);
  MESSAGE(variant << " o " << r_o.str() << "; lse " << r_l.str());
  CHECK(within(r_o, kOutTol));
  CHECK(within(r_l, kLseTol));

  DeviceBuffer<float> dq(nq), dk(nq), dv(nv);
  DeviceBuffer<uint8_t> ws(mla_backward_workspace_bytes(s));
  for (auto* b : {&dq, &dk, &dv}) b->fill_bytes(0xFF);
  ws.fill_bytes(0xFF);
  mla_backward(s, gq.data(), gk.data(), gv.data(), o.data(), lse.data(), gdo.data(), scale, dq.data(), dk.data(),
               dv.data(), ws.data(), nullptr, impl);
  device_sync();
  std::vector<double> rq(nq), rk(nq), rv(nv);
  ref::mla_backward(s, q.vals, k.vals, v.vals, d_o.vals, scale, rq, rk, rv);
  for (auto [name, got, want] : {std::tuple{std::string("dq"), &dq, &rq}, std::tuple{std::string("dk"), &dk, &rk},
                                 std::tuple{std::string("dv"), &dv, &rv}}) {
    const auto r = error_norms(widen(got->download()), *want);
    MESSAGE(variant << " " << name << " " << r.str());
    CHECK(within(r, kGradTol));
  }
}

}  // namespace

TEST_CASE("MLA attention forward and backward match the CPU reference") {
  for (auto impl : {AttentionImpl::tensor_core, AttentionImpl::simt}) {
    // A partial last tile and two batches at K3's head dims; one exact tile at GQA's 128 / 128.
    run_case(MlaShape{.batch = 2, .seq = 150, .heads = 3, .head_dim_qk = 192, .head_dim_v = 128}, impl);
    run_case(MlaShape{.batch = 1, .seq = 64, .heads = 2, .head_dim_qk = 128, .head_dim_v = 128}, impl);
  }
}

TEST_CASE("MLA rejects unsupported head dims") {
  CHECK_THROWS_AS(mla_check_shape(MlaShape{.seq = 8, .heads = 1, .head_dim_qk = 96}), std::invalid_argument);
}

