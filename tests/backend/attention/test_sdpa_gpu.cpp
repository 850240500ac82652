// SPDX-License-Identifier: MIT
// cuDNN fused SDPA (sdpa.hpp) against the double-precision CPU reference: MLA's head dims, MHA and
// GQA, forward and backward (needs a GPU; exit 77 otherwise). Fails, not skips, when the GPU is
// there but cuDNN is not: that is a broken install.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <stdexcept>

#include "backend/cuda/attention/reference.hpp"
#include "backend/cuda/attention/sdpa.hpp"
#include "backend/cuda/buffer.hpp"
#include "../gpu_test_util.hpp"
#include "../test_util.hpp"

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

// o is BF16 (2^-8 relative per element at most). lse is FP32 from FP32 score sums (1e-5).
// Gradients: BF16 outputs, and P, dS enter the tensor-core products in BF16 (as in every flash
// attention); D = rowsum(dO * O) uses the BF16 o. Errors of BF16 size relative to dS, with a
// factor 2 for the cancellation in dP - D: the same budget as the executor's own MLA kernels.
constexpr double kOutTol = 2.0 / 256;
constexpr double kLseTol = 1e-5;
constexpr double kGradTol = 4.0 / 256;

struct Case {
  std::string name;
  SdpaShape shape;
};

void run_case(Sdpa& sdpa, const Case& c, bool expect_backward) {
  const SdpaShape& s = c.shape;
  INFO(c.name << ": B " << s.batch << " T " << s.seq << " Hq " << s.heads_q << " Hkv " << s.heads_kv << " dqk "
              << s.head_dim_qk << " dv " << s.head_dim_v);
  const auto nq = static_cast<size_t>(s.batch * s.seq * s.heads_q * s.head_dim_qk);
  const auto nk = static_cast<size_t>(s.batch * s.seq * s.heads_kv * s.head_dim_qk);
  const auto nv = static_cast<size_t>(s.batch * s.seq * s.heads_kv * s.head_dim_v);
  const auto no = static_cast<size_t>(s.batch * s.seq * s.heads_q * s.head_dim_v);
  const auto nl = static_cast<size_t>(s.batch * s.seq * s.heads_q);
  const auto q = to_bf16(normal(nq)), k = to_bf16(normal(nk)), v = to_bf16(normal(nv)), d_o = to_bf16(normal(no));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim_qk));
  auto gq = to_device<bf16_bits>(q.bits), gk = to_device<bf16_bits>(k.bits), gv = to_device<bf16_bits>(v.bits);
  auto gdo = to_device<bf16_bits>(d_o.bits);
  DeviceBuffer<bf16_bits> o(no);
  DeviceBuffer<float> lse(nl);
  o.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  sdpa.forward(s, gq.data(), gk.data(), gv.data(), scale, o.data(), lse.data(), nullptr);
  device_sync();
  std::vector<double> o_ref(no), lse_ref(nl);
  ref::sdpa_forward(s, q.vals, k.vals, v.vals, scale, o_ref, lse_ref);
  const auto o_got = o.download();
  const auto r_o = error_norms(widen(o_got), o_ref), r_l = error_norms(widen(lse.download()), lse_ref);
  MESSAGE(c.name << " o " << r_o.str() << "; lse " << r_l.str());
  CHECK(within(r_o, kOutTol));
  CHECK(within(r_l, kLseTol));

  // The forward is deterministic: a second run (cached plan) writes the same bits.
  o.fill_bytes(0xFF);
  sdpa.forward(s, gq.data(), gk.data(), gv.data(), scale, o.data(), lse.data(), nullptr);
  device_sync();
  CHECK(o.download() == o_got);

  DeviceBuffer<bf16_bits> dq(nq), dk(nk), dv(nv);
  DeviceBuffer<uint8_t> scratch(sdpa_backward_scratch_bytes(s));
  for (auto* b : {&dq, &dk, &dv}) b->fill_bytes(0xFF);
  scratch.fill_bytes(0xFF);
  CHECK(sdpa_backward_supported(s) == expect_backward);
  if (!expect_backward) {
    CHECK_THROWS_AS(sdpa.backward(s, gq.data(), gk.data(), gv.data(), o.data(), lse.data(), gdo.data(), scale,
                                  dq.data(), dk.data(), dv.data(), scratch.data(), nullptr),
                    std::invalid_argument);
    return;
  }
  sdpa.backward(s, gq.data(), gk.data(), gv.data(), o.data(), lse.data(), gdo.data(), scale, dq.data(), dk.data(),
                dv.data(), scratch.data(), nullptr);
  device_sync();
  std::vector<double> rq(nq), rk(nk), rv(nv);
  ref::sdpa_backward(s, q.vals, k.vals, v.vals, d_o.vals, scale, rq, rk, rv);
  for (auto [name, got, want] : {std::tuple{std::string("dq"), &dq, &rq}, std::tuple{std::string("dk"), &dk, &rk},
                                 std::tuple{std::string("dv"), &dv, &rv}}) {
    const auto r = error_norms(widen(got->download()), *want);
    MESSAGE(c.name << " " << name << " " << r.str());
    CHECK(within(r, kGradTol));
  }
}

}  // namespace

TEST_CASE("cuDNN SDPA forward and backward match the CPU reference (MLA, MHA, GQA)") {
  std::string why;
  REQUIRE_MESSAGE(cudnn_sdpa_available(&why), why);
  Sdpa sdpa;
  const Case cases[] = {
      // K3's MLA head dims with two batches; MHA at Llama's head dim; GQA with groups of 4 (as
      // 64 q / 8 kv heads) and MQA (one key/value head).
      {"mla", SdpaShape{.batch = 2, .seq = 256, .heads_q = 3, .heads_kv = 3, .head_dim_qk = 192, .head_dim_v = 128}},
      {"mha", SdpaShape{.batch = 1, .seq = 128, .heads_q = 4, .heads_kv = 4, .head_dim_qk = 128, .head_dim_v = 128}},
      {"gqa", SdpaShape{.batch = 1, .seq = 256, .heads_q = 8, .heads_kv = 2, .head_dim_qk = 128, .head_dim_v = 128}},
      {"mqa", SdpaShape{.batch = 2, .seq = 128, .heads_q = 4, .heads_kv = 1, .head_dim_qk = 64, .head_dim_v = 64}},
  };
  for (const Case& c : cases) run_case(sdpa, c, true);
  // One plan per direction and shape, reused: running a shape again builds nothing.
  CHECK(sdpa.num_plans() == 2 * std::size(cases));
  run_case(sdpa, cases[0], true);
  CHECK(sdpa.num_plans() == 2 * std::size(cases));
  // A sequence that fills no tile exactly: the forward runs on every cuDNN; the backward where the
  // loaded cuDNN supports it, else it is refused with invalid_argument (not run wrong).
  const Case ragged{"mla_t150", SdpaShape{.batch = 1, .seq = 150, .heads_q = 2, .heads_kv = 2, .head_dim_qk = 192,
                                          .head_dim_v = 128}};
  run_case(sdpa, ragged, sdpa_backward_supported(ragged.shape));
  MESSAGE("plans:\n" << sdpa.describe_plans());
}

