// SPDX-License-Identifier: MIT
// KDA kernels against the CPU reference on fresh random inputs (needs a GPU; exit 77 otherwise).
#include <doctest/doctest.h>

#include <cmath>

#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/attention/reference.hpp"
#include "backend/cuda/buffer.hpp"
#include "../gpu_test_util.hpp"
#include "../test_util.hpp"

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

// Tolerances (error norms relative to the reference's). The kernels multiply on tensor cores with
// BF16 operands and FP32 accumulation, so every operand that is not an input (Aqk, T, the
// decay-scaled q and k, D, the states, dD, dAqk, dAkk) is rounded to BF16, 2^-8 relative, and so
// is the output. The output passes through about four such roundings (Aqk, T, D, o itself; a
// token alone: o = scale (q . k) beta v), each gradient through three to five: 4 * 2^-8 for both
// (the bound of the tensor-core MLA backward). dg is a reverse cumulative sum over the chunk of
// Qs dQs + k (P - N) (kda_backward.cu), terms that largely cancel: twice that
// (flash-linear-attention's chunk_kda test allows dg 2.5 times its dq bar for the same reason).
constexpr double kOutTol = 4 * u16;
constexpr double kGradTol = 4 * u16;
constexpr double kDgTol = 8 * u16;

// Log decays: over K3's range [-5, 0), mostly mild, some strong; or all strong, [-5, -4) (the state
// nearly forgotten every token, dg small beside the terms it is summed from).
enum class Decay { mixed, strong };

void run_case(const KdaShape& s, Decay decay = Decay::mixed) {
  INFO("B " << s.batch << " T " << s.seq << " H " << s.heads << " dv " << s.head_dim_v
            << (decay == Decay::strong ? " strong decay" : ""));
  const auto nk = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_k);
  const auto nv = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim_v);
  const auto nt = static_cast<size_t>(s.batch * s.seq * s.heads);
  auto qd = normal(nk), kd = normal(nk);
  l2_normalise_rows(qd, static_cast<size_t>(s.head_dim_k));
  l2_normalise_rows(kd, static_cast<size_t>(s.head_dim_k));
  const auto q = to_bf16(qd), k = to_bf16(kd), v = to_bf16(normal(nv)), d_o = to_bf16(normal(nv));
  auto gd = decay == Decay::strong ? uniform(nk, -5.0, -4.0) : uniform(nk, -5.0, 1.6);
  if (decay == Decay::mixed) {
    for (auto& x : gd) x = -std::exp(x);
  }
  auto bd = uniform(nt, 0.05, 0.95);
  const auto g = to_f32(gd), beta = to_f32(bd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim_k));

  auto dq_ = to_device<bf16_bits>(q.bits), dk_ = to_device<bf16_bits>(k.bits), dv_ = to_device<bf16_bits>(v.bits);
  auto ddo = to_device<bf16_bits>(d_o.bits);
  auto dg_ = to_device<float>(g), db_ = to_device<float>(beta);
  DeviceBuffer<bf16_bits> o(nv);
  DeviceBuffer<uint8_t> ws(std::max(kda_forward_workspace_bytes(s), kda_backward_workspace_bytes(s)));
  o.fill_bytes(0xFF);
  ws.fill_bytes(0xFF);  // the kernels must not read workspace they did not write
  kda_forward(s, dq_.data(), dk_.data(), dv_.data(), dg_.data(), db_.data(), scale, o.data(), ws.data(), nullptr);
  device_sync();

  std::vector<double> o_ref(nv);
  ref::kda_forward(s, q.vals, k.vals, v.vals, gd, bd, scale, o_ref);
  const auto r_o = error_norms(widen(o.download()), o_ref);
  INFO("o: " << r_o.str());
  CHECK(within(r_o, kOutTol));

  DeviceBuffer<float> gq(nk), gk(nk), gv(nv), gg(nk), gb(nt);
  for (auto* b : {&gq, &gk, &gv, &gg, &gb}) b->fill_bytes(0xFF);
  ws.fill_bytes(0xFF);
  kda_backward(s, dq_.data(), dk_.data(), dv_.data(), dg_.data(), db_.data(), ddo.data(), scale, gq.data(), gk.data(),
               gv.data(), gg.data(), gb.data(), ws.data(), nullptr);
  device_sync();
  std::vector<double> rq(nk), rk(nk), rv(nv), rg(nk), rb(nt);
  ref::kda_backward(s, q.vals, k.vals, v.vals, gd, bd, d_o.vals, scale, rq, rk, rv, rg, rb);
  const struct {
    std::string name;
    DeviceBuffer<float>* got;
    std::vector<double>* want;
  } grads[] = {{"dq", &gq, &rq}, {"dk", &gk, &rk}, {"dv", &gv, &rv}, {"dg", &gg, &rg}, {"dbeta", &gb, &rb}};
  for (const auto& c : grads) {
    const auto r = error_norms(widen(c.got->download()), *c.want);
    INFO(c.name << ": " << r.str());
    CHECK(within(r, c.name == "dg" ? kDgTol : kGradTol));
    MESSAGE(c.name << " " << r.str());
  }
  MESSAGE("o " << r_o.str());
}

}  // namespace

TEST_CASE("KDA forward and backward match the CPU reference") {
  // A partial last chunk (203 = 3 * 64 + 11), two batches, the K3 head dims.
  run_case(KdaShape{.batch = 2, .seq = 203, .heads = 3, .head_dim_k = 128, .head_dim_v = 128});
  // Exactly one chunk, a narrower value head.
  run_case(KdaShape{.batch = 1, .seq = 64, .heads = 2, .head_dim_k = 128, .head_dim_v = 64});
  // Many chunks (the state carried across 16 of them, forward and backward), dv = 32.
  run_case(KdaShape{.batch = 1, .seq = 1000, .heads = 2, .head_dim_k = 128, .head_dim_v = 32});
  // Every decay strong: the in-chunk factors reach their largest exponents (exp(15 * 5) within a
  // sub-chunk), and dg is small beside the terms it is summed from.
  run_case(KdaShape{.batch = 1, .seq = 203, .heads = 2, .head_dim_k = 128, .head_dim_v = 64}, Decay::strong);
}

TEST_CASE("KDA rejects unsupported shapes") {
  CHECK_THROWS_AS(kda_check_shape(KdaShape{.seq = 10, .heads = 1, .head_dim_k = 64}), std::invalid_argument);
  CHECK_THROWS_AS(kda_check_shape(KdaShape{.seq = 10, .heads = 1, .head_dim_v = 48}), std::invalid_argument);
}

