// SPDX-License-Identifier: MIT
// The CPU references themselves, on closed forms and finite differences (no GPU needed): a wrong
// reference would let a wrong kernel pass, so the references are tested first.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "backend/cuda/reference.hpp"

using namespace moesim::cuda;

namespace {

// Values k/64 with |k| <= 127 are exact in BF16, and so are their neighbours at +-1/64.
std::vector<bf16_bits> grid_values(size_t n, uint32_t seed) {
  std::vector<bf16_bits> v(n);
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    const int k = static_cast<int>((s >> 8) % 200) - 100;
    x = float_to_bf16(static_cast<float>(k == 0 ? 1 : k) / 64.0f);
  }
  return v;
}

// d/dx_i of f by central differences with the exact BF16 step 1/64.
double central_difference(std::vector<bf16_bits> x, size_t i, const std::function<double(const std::vector<bf16_bits>&)>& f) {
  const float x0 = bf16_to_float(x[i]);
  x[i] = float_to_bf16(x0 + 1.0f / 64);
  const double up = f(x);
  x[i] = float_to_bf16(x0 - 1.0f / 64);
  const double down = f(x);
  return (up - down) / (2.0 / 64);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

}  // namespace

TEST_CASE("BF16 conversion rounds to nearest even and keeps NaN") {
  CHECK(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  // BF16 keeps 7 fraction bits: the step at 1.0 is 1/128.
  CHECK(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)) == 1.0f);                // a tie: to even (down)
  CHECK(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64);    // a tie: to even (up)
  CHECK(bf16_to_float(float_to_bf16(1.0f + 0.75f / 128)) == 1.0f + 1.0f / 128);  // above half: up
  CHECK(bf16_to_float(float_to_bf16(1.0f + 0.25f / 128)) == 1.0f);               // below half: down
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  CHECK(std::isnan(bf16_to_float(bf16_nan())));
}

TEST_CASE("reference GEMM: op(A) op(B) in every transpose, against a hand-computed product") {
  // A = [[1, 2], [3, 4]] (m = k = 2), B = [[5, 6, 7], [8, 9, 10]] (k = 2, n = 3); AB = [[21, 24, 27], [47, 54, 61]].
  const auto b16 = [](std::initializer_list<float> v) {
    std::vector<bf16_bits> o;
    for (float f : v) o.push_back(float_to_bf16(f));
    return o;
  };
  const std::vector<double> want = {21, 24, 27, 47, 54, 61};
  CHECK(ref::gemm(b16({1, 2, 3, 4}), b16({5, 6, 7, 8, 9, 10}), 2, 3, 2, false, false) == want);
  CHECK(ref::gemm(b16({1, 3, 2, 4}), b16({5, 6, 7, 8, 9, 10}), 2, 3, 2, true, false) == want);
  CHECK(ref::gemm(b16({1, 2, 3, 4}), b16({5, 8, 6, 9, 7, 10}), 2, 3, 2, false, true) == want);
  std::vector<double> mag;
  CHECK(ref::gemm(b16({1, 3, 2, 4}), b16({5, 8, 6, 9, 7, 10}), 2, 3, 2, true, true, &mag) == want);
  CHECK(mag == want);  // all positive: sum |a b| = sum a b
}

TEST_CASE("RMSNorm backward is the gradient of the forward (finite differences)") {
  const int64_t rows = 3, cols = 24;
  const auto x = grid_values(static_cast<size_t>(rows * cols), 1);
  const auto w = grid_values(static_cast<size_t>(cols), 2);
  const auto dy = grid_values(static_cast<size_t>(rows * cols), 3);
  const auto dyd = ref::to_double(dy);
  const double eps = 1e-6;
  const auto bwd = ref::rmsnorm_backward(x, w, dy, rows, cols, eps);
  // L = sum dy * y; dL/dx and dL/dw.
  for (size_t i : {size_t{0}, size_t{5}, size_t{30}, size_t{71}}) {
    const double fd = central_difference(x, i, [&](const auto& xx) { return dot(dyd, ref::rmsnorm_forward(xx, w, rows, cols, eps).y); });
    CHECK(bwd.dx[i] == doctest::Approx(fd).epsilon(2e-3).scale(1.0));
  }
  for (size_t j : {size_t{0}, size_t{7}, size_t{23}}) {
    const double fd = central_difference(w, j, [&](const auto& ww) { return dot(dyd, ref::rmsnorm_forward(x, ww, rows, cols, eps).y); });
    CHECK(bwd.dw[j] == doctest::Approx(fd).epsilon(1e-9).scale(1.0));  // linear in w: exact up to rounding
  }
  // A row of equal values normalises to w.
  const std::vector<bf16_bits> flat(static_cast<size_t>(cols), float_to_bf16(0.75f));
  const auto y = ref::rmsnorm_forward(flat, w, 1, cols, 0).y;
  for (int64_t c = 0; c < cols; ++c) CHECK(y[static_cast<size_t>(c)] == doctest::Approx(bf16_to_float(w[static_cast<size_t>(c)])));
}

TEST_CASE("SwiGLU backward is the gradient of the forward; silu(0) = 0") {
  const int64_t rows = 2, f = 8;
  const auto h = grid_values(static_cast<size_t>(rows * 2 * f), 4);
  const auto dy = grid_values(static_cast<size_t>(rows * f), 5);
  const auto dyd = ref::to_double(dy);
  const auto dh = ref::swiglu_backward(h, dy, rows, f);
  for (size_t i = 0; i < h.size(); ++i) {
    const double fd = central_difference(h, i, [&](const auto& hh) { return dot(dyd, ref::swiglu_forward(hh, rows, f)); });
    CHECK(dh[i] == doctest::Approx(fd).epsilon(2e-3).scale(1.0));
  }
  std::vector<bf16_bits> z(2, float_to_bf16(0.0f));
  z[1] = float_to_bf16(3.0f);
  CHECK(ref::swiglu_forward(z, 1, 1)[0] == 0.0);
}

TEST_CASE("cross-entropy: uniform logits give log V; the gradient matches finite differences and sums to zero") {
  const int64_t vocab = 50;
  const std::vector<double> flat(static_cast<size_t>(vocab), 0.3);
  const std::vector<int32_t> t = {7};
  CHECK(ref::cross_entropy(flat, t, 1, vocab, 1.0).loss[0] == doctest::Approx(std::log(50.0)));
  std::vector<double> z(static_cast<size_t>(vocab));
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::sin(static_cast<double>(i)) * 3;
  const auto ce = ref::cross_entropy(z, t, 1, vocab, 0.5);
  CHECK(std::accumulate(ce.dlogits.begin(), ce.dlogits.end(), 0.0) == doctest::Approx(0.0).scale(1.0));
  for (size_t i : {size_t{0}, size_t{7}, size_t{49}}) {
    const double h = 1e-6;
    auto up = z, down = z;
    up[i] += h;
    down[i] -= h;
    const double fd = 0.5 * (ref::cross_entropy(up, t, 1, vocab, 1).loss[0] - ref::cross_entropy(down, t, 1, vocab, 1).loss[0]) / (2 * h);
    CHECK(ce.dlogits[i] == doctest::Approx(fd).epsilon(1e-6));
  }
}

TEST_CASE("router: the bias steers selection, not the weights; softmax scores sum to one") {
  // Two tokens, four experts, top 2.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f, 0.5f, 0.5f, 3.0f, 0.0f};
  const auto s = ref::router_scores(logits, 2, 4, false);
  CHECK(s[0] == doctest::Approx(1 / (1 + std::exp(-2.0))));
  const auto plain = ref::router_topk(s, {}, 2, 4, 2, true);
  CHECK(plain.index == std::vector<int32_t>{0, 1, 2, 0});  // token 1: experts 0 and 1 tie; the lower index wins
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 1.0f};
  const auto biased = ref::router_topk(s, bias, 2, 4, 2, false);
  CHECK(biased.index == std::vector<int32_t>{3, 0, 3, 2});
  CHECK(biased.weight[0] == doctest::Approx(1 / (1 + std::exp(1.0))));  // the unbiased score of expert 3
  CHECK(plain.weight[0] + plain.weight[1] == doctest::Approx(1.0));
  const auto soft = ref::router_scores(logits, 2, 4, true);
  CHECK(soft[0] + soft[1] + soft[2] + soft[3] == doctest::Approx(1.0));
}

TEST_CASE("permute plan is grouped by expert and stable; unpermute with weights 1/k restores the tokens") {
  const std::vector<int32_t> idx = {2, 0, 0, 2, 1, 2};  // three tokens, top 2
  const auto p = ref::permute_plan(idx, 4);
  CHECK(p.counts == std::vector<int32_t>{2, 1, 3, 0});
  CHECK(p.offsets == std::vector<int32_t>{0, 2, 3, 6, 6});
  CHECK(p.dest_row == std::vector<int32_t>{3, 0, 1, 4, 2, 5});
  // Rows in expert order holding each assignment's token value; combining with 1/2 gives the token back.
  std::vector<bf16_bits> yp(6);
  for (size_t a = 0; a < idx.size(); ++a) yp[static_cast<size_t>(p.dest_row[a])] = float_to_bf16(static_cast<float>(a / 2 + 1));
  const std::vector<float> w(6, 0.5f);
  CHECK(ref::unpermute_combine(yp, p.dest_row, w, 3, 2, 1) == std::vector<double>{1, 2, 3});
}

TEST_CASE("AdamW's first step moves each weight by lr (sign(g) + wd w) when eps is negligible") {
  ref::AdamWState s{{1.0, -2.0}, {0, 0}, {0, 0}};
  const std::vector<float> g = {0.5f, -0.25f};
  ref::adamw_step(s, g, 0.01, 0.9, 0.95, 1e-12, 0.1, 1);
  CHECK(s.master[0] == doctest::Approx(1.0 - 0.01 * (1 + 0.1 * 1.0)));
  CHECK(s.master[1] == doctest::Approx(-2.0 - 0.01 * (-1 + 0.1 * -2.0)));
  CHECK(s.m[0] == doctest::Approx(0.05));
  CHECK(s.v[1] == doctest::Approx(0.05 * 0.0625));
}

TEST_CASE("embedding references: gather clamps ids; scatter-add is the gather's adjoint") {
  // table rows [10, 11], [20, 21], [30, 31]; ids -1 and 5 clamp to the first and last rows.
  std::vector<bf16_bits> table;
  for (float v : {10.f, 11.f, 20.f, 21.f, 30.f, 31.f}) table.push_back(float_to_bf16(v));
  const std::vector<int32_t> ids = {1, -1, 5, 1};
  CHECK(ref::gather_rows(table, ids, 2, 3) == std::vector<double>{20, 21, 10, 11, 30, 31, 20, 21});
  std::vector<bf16_bits> dy;
  for (float v : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}) dy.push_back(float_to_bf16(v));
  const std::vector<float> grad0(6, 0.5f);
  CHECK(ref::scatter_add_rows(grad0, dy, ids, 2, 3) == std::vector<double>{3.5, 4.5, 8.5, 10.5, 5.5, 6.5});
  // <gather(T), dY> = <T, scatter_add(0, dY)>
  const auto g = ref::gather_rows(table, ids, 2, 3);
  const auto s = ref::scatter_add_rows(std::vector<float>(6, 0.f), dy, ids, 2, 3);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < g.size(); ++i) lhs += g[i] * bf16_to_float(dy[i]);
  for (size_t i = 0; i < s.size(); ++i) rhs += s[i] * bf16_to_float(table[i]);
  CHECK(lhs == doctest::Approx(rhs));
}

TEST_CASE("short convolution: a unit tap shifts; the transposed convolution is the adjoint") {
  const int64_t rows = 5, channels = 2;
  const int width = 3;
  std::vector<bf16_bits> x, w;
  for (int i = 0; i < rows * channels; ++i) x.push_back(float_to_bf16(static_cast<float>(i + 1)));
  // Channel 0: tap 1 (one step back in time); channel 1: tap 0 (identity).
  for (float v : {0.f, 1.f, 0.f, 1.f, 0.f, 0.f}) w.push_back(float_to_bf16(v));
  const auto y = ref::short_conv(x, w, rows, channels, width, false);
  CHECK(y == std::vector<double>{0, 2, 1, 4, 3, 6, 5, 8, 7, 10});
  // <conv(x), z> = <x, conv^T(z)> for any z, with random taps.
  std::vector<bf16_bits> wr, z;
  for (int i = 0; i < channels * width; ++i) wr.push_back(float_to_bf16(0.25f * static_cast<float>(i) - 0.5f));
  for (int i = 0; i < rows * channels; ++i) z.push_back(float_to_bf16(static_cast<float>((i * 7) % 5) - 2.f));
  const auto cx = ref::short_conv(x, wr, rows, channels, width, false);
  const auto ctz = ref::short_conv(z, wr, rows, channels, width, true);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < cx.size(); ++i) lhs += cx[i] * bf16_to_float(z[i]);
  for (size_t i = 0; i < ctz.size(); ++i) rhs += ctz[i] * bf16_to_float(x[i]);
  CHECK(lhs == doctest::Approx(rhs));
}

TEST_CASE("Attention Residuals mix: weights sum the sources; the backward is the adjoint") {
  std::vector<bf16_bits> x;
  for (float v : {1.f, 2.f, 10.f, 20.f}) x.push_back(float_to_bf16(v));  // 2 sources of 2 elements
  const std::vector<float> a = {0.5f, 0.25f};
  CHECK(ref::residual_mix(x, a, 2) == std::vector<double>{3.0, 6.0});
  std::vector<bf16_bits> dy = {float_to_bf16(4.f), float_to_bf16(-8.f)};
  CHECK(ref::residual_mix_backward(dy, a) == std::vector<double>{2, -4, 1, -2});
}

TEST_CASE("move_bytes reference: a fold keeps the inputs' sum, a widening repeats each input in order") {
  std::vector<bf16_bits> in;
  for (int i = 0; i < 10; ++i) in.push_back(float_to_bf16(static_cast<float>(i + 1)));
  const auto folded = ref::move_bytes(in, 4);  // outputs 0..3 take inputs {0, 4, 8}, {1, 5, 9}, {2, 6}, {3, 7}
  CHECK(folded == std::vector<double>{1 + 5 + 9, 2 + 6 + 10, 3 + 7, 4 + 8});
  CHECK(std::accumulate(folded.begin(), folded.end(), 0.0) == 55.0);
  const auto widened = ref::move_bytes(std::span<const bf16_bits>(in).first(3), 7);  // in[floor(i * 3 / 7)]
  CHECK(widened == std::vector<double>{1, 1, 1, 2, 2, 3, 3});
}
