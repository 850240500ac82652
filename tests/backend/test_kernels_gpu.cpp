// SPDX-License-Identifier: MIT
// Every backend kernel against its CPU reference (reference.hpp) on fresh random inputs, outputs
// poisoned with NaN first. Bounds come from the dtypes: BF16 outputs are within one rounding
// (2^-8 relative) of the FP32 result, and FP32 sums of k terms within k * 2^-24 of the sum of
// magnitudes (the classic worst-case accumulation bound); each test says which terms apply.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/host_copy.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/lora.hpp"
#include "backend/cuda/loss.hpp"
#include "backend/cuda/reference.hpp"
#include "backend/cuda/timer.hpp"
#include "gpu_test_util.hpp"
#include "test_util.hpp"

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("GEMM: every transpose combination and skinny shapes, BF16 and FP32 outputs") {
  Gemm gemm;
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  for (const Case& c : {Case{128, 96, 1024, false, true}, Case{8, 256, 512, false, true}, Case{200, 64, 48, false, false},
                        Case{64, 136, 256, true, false}, Case{40, 72, 88, true, true}}) {
    CAPTURE(c.m);
    CAPTURE(c.n);
    CAPTURE(c.k);
    CAPTURE(c.ta);
    CAPTURE(c.tb);
    const auto a = random_bf16(static_cast<size_t>(c.m * c.k));
    const auto b = random_bf16(static_cast<size_t>(c.n * c.k));
    std::vector<double> mag;
    const auto ref = ref::gemm(a, b, c.m, c.n, c.k, c.ta, c.tb, &mag);
    auto da = to_device(a);
    auto db = to_device(b);
    const GemmShape shape{c.m, c.n, c.k, c.ta ? Trans::transpose : Trans::none, c.tb ? Trans::transpose : Trans::none,
                          OutType::bf16};
    auto dc = poisoned<bf16_bits>(static_cast<size_t>(c.m * c.n));
    gemm.run(shape, da.data(), db.data(), dc.data(), 1.0f, 0.0f, nullptr);
    device_sync();
    const double kk = static_cast<double>(c.k);
    // FP32 accumulation, then one BF16 rounding.
    check_bf16("gemm bf16", dc.download(), ref, [&](size_t i) { return u16 * std::abs(ref[i]) + 2 * kk * u32 * mag[i]; });

    GemmShape s32 = shape;
    s32.out = OutType::fp32;
    auto dc32 = poisoned<float>(static_cast<size_t>(c.m * c.n));
    gemm.run(s32, da.data(), db.data(), dc32.data(), 1.0f, 0.0f, nullptr);
    device_sync();
    check_f32("gemm fp32", dc32.download(), ref, [&](size_t i) { return u32 * std::abs(ref[i]) + 2 * kk * u32 * mag[i]; });
  }
}

TEST_CASE("GEMM autotuning: beta != 0 survives the trial runs, the choice matches the reference") {
  // The first run of a shape times every algorithm on the caller's buffers; with beta != 0 it must
  // restore C before the final run, so the output is exactly one C = alpha A B^T + beta C.
  Gemm gemm;
  const int64_t m = 256, n = 384, k = 512;
  const float alpha = 0.75f, beta = 0.5f;
  const auto a = random_bf16(static_cast<size_t>(m * k));
  const auto b = random_bf16(static_cast<size_t>(n * k));
  const auto c0 = random_f32(static_cast<size_t>(m * n));
  std::vector<double> mag;
  const auto prod = ref::gemm(a, b, m, n, k, false, true, &mag);
  std::vector<double> ref(prod.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = alpha * prod[i] + beta * static_cast<double>(c0[i]);
  auto da = to_device(a);
  auto db = to_device(b);
  auto dc = to_device(c0);
  const GemmShape shape{m, n, k, Trans::none, Trans::transpose, OutType::fp32};
  gemm.run(shape, da.data(), db.data(), dc.data(), alpha, beta, nullptr);
  device_sync();
  CHECK(gemm.chosen_heuristic_index(shape) >= 0);
  CHECK(gemm.chosen_heuristic_index(shape) < gemm.num_algorithms(shape));
  check_f32("autotuned gemm, beta 0.5", dc.download(), ref, [&](size_t i) {
    return u32 * std::abs(ref[i]) + 2 * static_cast<double>(k) * u32 * alpha * mag[i] + 2 * u32 * std::abs(beta * c0[i]);
  });
  // Every rank of the tuned order runs (calibration times them all) and gives the same product.
  for (int r = 0; r < gemm.num_algorithms(shape); ++r) {
    CAPTURE(r);
    auto dr = poisoned<float>(static_cast<size_t>(m * n));
    try {
      gemm.run(shape, da.data(), db.data(), dr.data(), 1.0f, 0.0f, nullptr, r);
    } catch (const BackendError&) {
      continue;  // an algorithm the heuristic ranks may refuse the problem at run time
    }
    device_sync();
    check_f32("gemm rank", dr.download(), prod,
              [&](size_t i) { return u32 * std::abs(prod[i]) + 2 * static_cast<double>(k) * u32 * mag[i]; });
  }
}

TEST_CASE("GEMM autotuning: the choice is never slower than the heuristic's first beyond timing noise") {
  // K3 linear-layer shapes where the heuristic's first choice was 10-14% slower than its best
  // (docs/calibration/README.md), and one where it was the best. Median of 15 event-timed runs each
  // (timer.hpp), interleaved, on random inputs; 5% allows for the run-to-run noise of short kernels.
  Gemm gemm;
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& sh : {Shape{64, 7168, 12288}, Shape{2048, 3584, 7168}, Shape{4096, 7168, 12288}, Shape{512, 12288, 7168}}) {
    CAPTURE(sh.m);
    CAPTURE(sh.n);
    CAPTURE(sh.k);
    auto da = to_device(random_bf16(static_cast<size_t>(sh.m * sh.k)));
    auto db = to_device(random_bf16(static_cast<size_t>(sh.n * sh.k)));
    DeviceBuffer<bf16_bits> dc(static_cast<size_t>(sh.m * sh.n));
    const GemmShape shape{sh.m, sh.n, sh.k, Trans::none, Trans::transpose, OutType::bf16};
    gemm.run(shape, da.data(), db.data(), dc.data(), 1.0f, 0.0f, nullptr);  // tunes
    const int chosen = gemm.chosen_heuristic_index(shape);
    REQUIRE(chosen >= 0);
    const int first_rank = chosen == 0 ? 0 : 1;  // where the heuristic's first sits in the tuned order
    const auto time_rank = [&](int rank) {  // one run, in milliseconds
      return time_on_stream(nullptr, 0, 1, [&](int) {
               gemm.run(shape, da.data(), db.data(), dc.data(), 1.0f, 0.0f, nullptr, rank);
             }).median_s * 1e3;
    };
    for (int w = 0; w < 3; ++w) {
      time_rank(0);
      time_rank(first_rank);
    }
    std::vector<double> tuned, first;
    for (int r = 0; r < 15; ++r) {
      tuned.push_back(time_rank(0));
      first.push_back(time_rank(first_rank));
    }
    const double t = summarize(tuned).median_s, f = summarize(first).median_s;
    MESSAGE("gemm " << sh.m << " x " << sh.n << " x " << sh.k << ": chosen heuristic index " << chosen << " of "
                    << gemm.num_algorithms(shape) << ", " << t * 1e3 << " us vs heuristic's first " << f * 1e3
                    << " us (" << f / t << "x)");
    CHECK(t <= 1.05 * f);
  }
}

namespace {

using GroupedRun = std::function<void(const std::vector<int32_t>& rows, int64_t n, int64_t k, Trans tb,
                                       const bf16_bits* x, const bf16_bits* w, bf16_bits* y)>;

// Runs a grouped GEMM over experts with `rows` tokens each (y_e = x_e op(w_e): w_e^T with w_e
// stored [n, k] for tb transpose, w_e stored [k, n] for none) and checks it against the
// reference, expert by expert.
void check_grouped(const GroupedRun& run, const std::vector<int32_t>& rows, int64_t n, int64_t k, Trans tb,
                   const char* what) {
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  const auto x = random_bf16(static_cast<size_t>(total * k));
  const auto w = random_bf16(rows.size() * static_cast<size_t>(n * k));
  auto dx = to_device(x);
  auto dw = to_device(w);
  auto dy = poisoned<bf16_bits>(static_cast<size_t>(total * n));
  run(rows, n, k, tb, dx.data(), dw.data(), dy.data());
  device_sync();
  std::vector<double> ref, mag;
  int64_t off = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    const std::span<const bf16_bits> xe(x.data() + off * k, static_cast<size_t>(rows[e] * k));
    const std::span<const bf16_bits> we(w.data() + e * static_cast<size_t>(n * k), static_cast<size_t>(n * k));
    std::vector<double> me;
    const auto re = ref::gemm(xe, we, rows[e], n, k, false, tb == Trans::transpose, &me);
    ref.insert(ref.end(), re.begin(), re.end());
    mag.insert(mag.end(), me.begin(), me.end());
    off += rows[e];
  }
  check_bf16(what, dy.download(), ref,
             [&](size_t i) { return u16 * std::abs(ref[i]) + 2 * static_cast<double>(k) * u32 * mag[i]; });
}

void check_expert_loop(Gemm& gemm, const std::vector<int32_t>& rows, int64_t n, int64_t k, const char* what) {
  check_grouped([&](const std::vector<int32_t>& r, int64_t n_, int64_t k_, Trans tb, const bf16_bits* x,
                    const bf16_bits* w, bf16_bits* y) { expert_gemm_loop(gemm, r, n_, k_, tb, x, w, n_ * k_, y, nullptr); },
                rows, n, k, Trans::transpose, what);
}

}  // namespace

TEST_CASE("cuBLAS's grouped GEMM: both operand layouts, uneven rows, experts with none") {
  GroupedGemm grouped;
  const GroupedRun run = [&](const std::vector<int32_t>& r, int64_t n, int64_t k, Trans tb, const bf16_bits* x,
                             const bf16_bits* w, bf16_bits* y) { grouped.run(r, n, k, tb, x, w, n * k, y, nullptr); };
  check_grouped(run, {24, 0, 64, 8, 40}, 96, 128, Trans::transpose, "cublas grouped gemm (w^T)");
  check_grouped(run, {24, 0, 64, 8, 40}, 96, 128, Trans::none, "cublas grouped gemm (w)");
  // A second call with more groups than the first (the pointer arrays grow) and one with none at all.
  check_grouped(run, {17, 33, 0, 5, 64, 1, 128, 9}, 256, 384, Trans::transpose, "cublas grouped gemm (grown)");
  CHECK_NOTHROW(grouped.run(std::vector<int32_t>{0, 0}, 64, 64, Trans::transpose, nullptr, nullptr, 64 * 64, nullptr,
                            nullptr));  // nothing to launch
}

TEST_CASE("expert GEMM loop: row counts of one power-of-two bucket reuse the tuned choice") {
  Gemm gemm;
  const int64_t n = 256, k = 384;
  for (const std::vector<int32_t>& rows : {std::vector<int32_t>{40, 64, 33}, std::vector<int32_t>{50, 0, 63, 57}}) {
    check_expert_loop(gemm, rows, n, k, "expert loop (bucketed choice)");
    for (const int32_t r : rows) {
      if (r > 0) CHECK(gemm.chosen_heuristic_index({r, n, k, Trans::none, Trans::transpose, OutType::bf16}) >= 0);
    }
  }
}

TEST_CASE("expert GEMM loop: uneven rows per expert, an expert with none") {
  Gemm gemm;
  check_expert_loop(gemm, {24, 0, 64, 8, 40}, 96, 128, "expert loop");
}

TEST_CASE("grouped GEMM: the faster way is chosen on a key's first run and kept for the key") {
  Gemm gemm;
  const GroupedRun run = [&](const std::vector<int32_t>& r, int64_t n, int64_t k, Trans tb, const bf16_bits* x,
                             const bf16_bits* w, bf16_bits* y) { grouped_gemm(gemm, r, n, k, tb, x, w, n * k, y, nullptr); };
  const std::vector<int32_t> first{24, 0, 64, 8, 40}, same_key{30, 0, 0, 40, 20, 45};  // 4 experts, mean 34 -> 64
  CHECK(gemm.expert_way(first, 96, 128, Trans::transpose) == Gemm::ExpertWay::undecided);
  check_grouped(run, first, 96, 128, Trans::transpose, "grouped gemm, first run of the key (w^T)");
  const Gemm::ExpertWay way = gemm.expert_way(first, 96, 128, Trans::transpose);
  CHECK(way != Gemm::ExpertWay::undecided);
  CHECK(gemm.expert_way(same_key, 96, 128, Trans::transpose) == way);
  check_grouped(run, same_key, 96, 128, Trans::transpose, "grouped gemm, the key's choice reused");
  CHECK(gemm.expert_way(same_key, 96, 128, Trans::none) == Gemm::ExpertWay::undecided);  // another layout, another key
  check_grouped(run, first, 96, 128, Trans::none, "grouped gemm (w)");
  CHECK(gemm.expert_way(first, 96, 128, Trans::none) != Gemm::ExpertWay::undecided);
  CHECK_NOTHROW(grouped_gemm(gemm, std::vector<int32_t>{0, 0}, 64, 64, Trans::transpose, nullptr, nullptr, 64 * 64,
                             nullptr, nullptr));  // no rows: nothing to launch or time
}

TEST_CASE("RMSNorm forward and backward") {
  // 1000: the vectorised path (a multiple of 8, not of the block); 1001: the scalar one, odd columns;
  // 64, 128 and 200: short rows, 8, 16 and 32 lanes a row (128: QK-norm's head_dim; 200: lanes
  // without work). dw is summed over ranges of at least 16 rows, up to 512 of them: 53 rows are 4
  // ranges, the last one shorter; 128 x 20,011 (QK-norm's (token, head) rows) 512; 1000 x 1,301
  // 82; 2048 x 9 one range, written straight to dw. 7168 x 300: wide rows (4 register chunks a
  // thread, K3's hidden size); 9000 x 40: wider than the fused kernel takes (dx, then dw).
  for (const auto& [cols, rows] : {std::pair<int64_t, int64_t>{1000, 53}, {1001, 53}, {64, 53}, {128, 53}, {200, 53},
                                   {128, 20011}, {1000, 1301}, {2048, 9}, {7168, 300}, {9000, 40}}) {
  CAPTURE(cols);
  CAPTURE(rows);
  const int64_t ranges_scratch = rmsnorm_backward_scratch_floats(rows, cols);
  CHECK(ranges_scratch == (rows <= 16 ? 0 : std::min<int64_t>(512, (rows + 15) / 16) * cols));
  const double eps = 1e-6;
  const auto x = random_bf16(static_cast<size_t>(rows * cols), -2, 2);
  const auto w = random_bf16(static_cast<size_t>(cols), 0.5, 1.5);
  const auto dy = random_bf16(static_cast<size_t>(rows * cols));
  auto dx_in = to_device(x);
  auto dwt = to_device(w);
  auto ddy = to_device(dy);
  auto y = poisoned<bf16_bits>(x.size());
  auto rstd = poisoned<float>(static_cast<size_t>(rows));
  rmsnorm_forward(dx_in.data(), dwt.data(), y.data(), rstd.data(), rows, cols, static_cast<float>(eps), nullptr);
  auto dx = poisoned<bf16_bits>(x.size());
  auto dw = poisoned<float>(static_cast<size_t>(cols));
  auto scratch = poisoned<float>(static_cast<size_t>(std::max<int64_t>(1, ranges_scratch)));
  rmsnorm_backward(dx_in.data(), dwt.data(), rstd.data(), ddy.data(), dx.data(), dw.data(), rows, cols,
                   ranges_scratch > 0 ? scratch.data() : nullptr, nullptr);
  device_sync();
  const auto fwd = ref::rmsnorm_forward(x, w, rows, cols, eps);
  const auto bwd = ref::rmsnorm_backward(x, w, dy, rows, cols, eps);
  const double c = static_cast<double>(cols);
  // rstd: an FP32 sum of `cols` squares, then rsqrt (a few ulp).
  const double rel = (c + 8) * u32;
  check_f32("rstd", rstd.download(), fwd.rstd, [&](size_t i) { return rel * fwd.rstd[i]; });
  check_bf16("rmsnorm y", y.download(), fwd.y, [&](size_t i) { return (u16 + rel) * std::abs(fwd.y[i]) * 1.01; });
  // dx = r (g - xhat mean): the mean is an FP32 sum of cols terms; the difference may cancel, so the
  // bound scales with the terms' magnitudes rather than with the result.
  std::vector<double> scale(x.size());
  std::vector<double> dw_mag(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double rs = fwd.rstd[static_cast<size_t>(r)];
    double sum_abs = 0, mean = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = static_cast<size_t>(r * cols + j);
      const double t = bf16_to_float(dy[i]) * bf16_to_float(w[static_cast<size_t>(j)]) * bf16_to_float(x[i]) * rs;
      sum_abs += std::abs(t);
      mean += t;
      dw_mag[static_cast<size_t>(j)] += std::abs(bf16_to_float(dy[i]) * bf16_to_float(x[i]) * rs);
    }
    mean /= c;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = static_cast<size_t>(r * cols + j);
      const double g = bf16_to_float(dy[i]) * bf16_to_float(w[static_cast<size_t>(j)]);
      const double xhat = bf16_to_float(x[i]) * rs;
      scale[i] = rs * (std::abs(g) + std::abs(xhat) * (std::abs(mean) + sum_abs / c)) * 1.01;
    }
  }
  check_bf16("rmsnorm dx", dx.download(), bwd.dx, [&](size_t i) { return u16 * std::abs(bwd.dx[i]) + (2 * rel) * scale[i]; });
  check_f32("rmsnorm dw", dw.download(), bwd.dw,
            [&](size_t j) { return (static_cast<double>(rows) + 2 * rel / u32) * u32 * dw_mag[j] * 1.01; });
  }
}

TEST_CASE("SwiGLU forward and backward, elementwise add") {
  // 520: the vectorised path; 521: the scalar one.
  for (const int64_t f : {int64_t{520}, int64_t{521}}) {
  CAPTURE(f);
  const int64_t rows = 64;
  const auto h = random_bf16(static_cast<size_t>(rows * 2 * f), -4, 4);
  const auto dy = random_bf16(static_cast<size_t>(rows * f));
  auto dh_in = to_device(h);
  auto ddy = to_device(dy);
  auto y = poisoned<bf16_bits>(static_cast<size_t>(rows * f));
  auto dh = poisoned<bf16_bits>(h.size());
  swiglu_forward(dh_in.data(), y.data(), rows, f, nullptr);
  swiglu_backward(dh_in.data(), ddy.data(), dh.data(), rows, f, nullptr);
  device_sync();
  const auto yr = ref::swiglu_forward(h, rows, f);
  const auto dhr = ref::swiglu_backward(h, dy, rows, f);
  // __expf is within a few ulp for |x| <= 4; 32 ulp of FP32 covers it and the products.
  check_bf16("swiglu y", y.download(), yr, [&](size_t i) { return (u16 + 32 * u32) * std::abs(yr[i]); });
  std::vector<double> mag(h.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < f; ++c) {
      const double g = bf16_to_float(h[static_cast<size_t>(r * 2 * f + c)]);
      const double u = bf16_to_float(h[static_cast<size_t>(r * 2 * f + f + c)]);
      const double d = bf16_to_float(dy[static_cast<size_t>(r * f + c)]);
      const double s = 1 / (1 + std::exp(-g));
      mag[static_cast<size_t>(r * 2 * f + c)] = std::abs(d * u * s) * (1 + std::abs(g) * (1 - s));  // silu' may cancel
      mag[static_cast<size_t>(r * 2 * f + f + c)] = std::abs(d * g * s);
    }
  }
  check_bf16("swiglu dh", dh.download(), dhr, [&](size_t i) { return u16 * std::abs(dhr[i]) + 32 * u32 * mag[i]; });
  }

  const int64_t n = 4104;  // a multiple of 8: the vectorised path; and n + 1: the scalar one
  for (int64_t len : {n, n + 1}) {
    const auto a = random_bf16(static_cast<size_t>(len));
    const auto b = random_bf16(static_cast<size_t>(len));
    auto da = to_device(a);
    auto db = to_device(b);
    auto dc = poisoned<bf16_bits>(a.size());
    add(da.data(), db.data(), dc.data(), len, nullptr);
    device_sync();
    std::vector<double> ref(a.size());
    for (size_t i = 0; i < a.size(); ++i) ref[i] = static_cast<double>(bf16_to_float(a[i])) + bf16_to_float(b[i]);
    check_bf16("add", dc.download(), ref, [&](size_t i) { return u16 * std::abs(ref[i]); });
  }
}

TEST_CASE("router: logits GEMM, sigmoid and softmax scores, biased top-k") {
  Gemm gemm;
  const int64_t tokens = 300, d = 256;  // 300 tokens: a partial block of token-warps
  const int top_k = 8;
  for (const int experts : {160, 100}) {  // 100: lanes with unequal shares of the experts
  CAPTURE(experts);
  const auto x = random_bf16(static_cast<size_t>(tokens * d));
  const auto wr = random_bf16(static_cast<size_t>(experts * d), -0.2, 0.2);
  const auto bias = random_f32(static_cast<size_t>(experts), -0.05, 0.05);
  auto dx = to_device(x);
  auto dwr = to_device(wr);
  auto dbias = to_device(bias);
  auto logits = poisoned<float>(static_cast<size_t>(tokens * experts));
  gemm.run({tokens, experts, d, Trans::none, Trans::transpose, OutType::fp32}, dx.data(), dwr.data(), logits.data(), 1.0f,
           0.0f, nullptr);
  device_sync();
  std::vector<double> mag;
  const auto lref = ref::gemm(x, wr, tokens, experts, d, false, true, &mag);
  const auto lgot = logits.download();
  check_f32("router logits", lgot, lref,
            [&](size_t i) { return u32 * std::abs(lref[i]) + 2 * static_cast<double>(d) * u32 * mag[i]; });

  for (bool softmax : {false, true}) {
    for (bool use_bias : {false, true}) {
      CAPTURE(softmax);
      CAPTURE(use_bias);
      auto idx = poisoned<int32_t>(static_cast<size_t>(tokens * top_k));
      auto wts = poisoned<float>(static_cast<size_t>(tokens * top_k));
      router_topk(logits.data(), use_bias ? dbias.data() : nullptr, tokens, experts, top_k,
                  softmax ? RouterScore::softmax : RouterScore::sigmoid, true, idx.data(), wts.data(), nullptr);
      device_sync();
      // The reference scores the GPU's own FP32 logits, so only the selection and scoring are tested here.
      const auto scores = ref::router_scores(lgot, tokens, experts, softmax);
      const std::span<const float> b = use_bias ? std::span<const float>(bias) : std::span<const float>();
      const auto want = ref::router_topk(scores, b, tokens, experts, top_k, true);
      const auto gi = idx.download();
      const auto gw = wts.download();
      // Scores carry FP32 error: a few ulp for the sigmoid, a sum over the experts for the softmax.
      const double score_rel = softmax ? (experts + 16) * u32 : 16 * u32;
      int exact = 0;
      int bad = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        const auto key = [&](int32_t e) {
          return scores[static_cast<size_t>(t * experts + e)] + (use_bias ? bias[static_cast<size_t>(e)] : 0.0);
        };
        const double kth = key(want.index[static_cast<size_t>(t * top_k + top_k - 1)]);
        std::set<int32_t> seen;
        double sum = 0;
        bool same = true;
        for (int j = 0; j < top_k; ++j) {
          const int32_t e = gi[static_cast<size_t>(t * top_k + j)];
          if (e < 0 || e >= experts || !seen.insert(e).second) {
            ++bad;
            continue;
          }
          // A valid top-k: every chosen key at least the k-th largest, up to the scores' rounding.
          if (!(key(e) >= kth - 2 * score_rel)) ++bad;
          same = same && e == want.index[static_cast<size_t>(t * top_k + j)];
          sum += scores[static_cast<size_t>(t * experts + e)];
        }
        exact += same;
        for (int j = 0; j < top_k; ++j) {
          const int32_t e = gi[static_cast<size_t>(t * top_k + j)];
          if (e < 0 || e >= experts) continue;
          const double w = scores[static_cast<size_t>(t * experts + e)] / sum;
          const double got = gw[static_cast<size_t>(t * top_k + j)];
          if (!(std::abs(got - w) <= (2 * score_rel + (top_k + 4) * u32) * w)) ++bad;
        }
      }
      INFO("tokens whose selection matches the reference exactly: " << exact << " of " << tokens);
      CHECK(bad == 0);
      CHECK(exact >= tokens * 9 / 10);  // near-ties may legitimately swap; most rows must match exactly
    }
  }
  }
}

TEST_CASE("permute plan, permute rows and unpermute with combine weights") {
  // 264 columns: 16-byte accesses (8 a thread); 263: one element a thread.
  for (const int64_t cols : {int64_t{264}, int64_t{263}}) {
  CAPTURE(cols);
  const int64_t tokens = 500;
  const int experts = 37, top_k = 6;
  // Distinct experts per token, as top-k produces; skewed so that some experts get none.
  std::vector<int32_t> idx(static_cast<size_t>(tokens * top_k));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> pool(static_cast<size_t>(experts - 5));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    std::copy(pool.begin(), pool.begin() + top_k, idx.begin() + t * top_k);
  }
  const auto weights = random_f32(idx.size(), 0, 1);
  const auto x = random_bf16(static_cast<size_t>(tokens * cols));
  auto didx = to_device(idx);
  auto counts = poisoned<int32_t>(static_cast<size_t>(experts));
  auto offsets = poisoned<int32_t>(static_cast<size_t>(experts + 1));
  auto dest = poisoned<int32_t>(idx.size());
  DeviceBuffer<int32_t> scratch(static_cast<size_t>(permute_plan_scratch(static_cast<int64_t>(idx.size()), experts)));
  permute_plan(didx.data(), static_cast<int64_t>(idx.size()), experts, counts.data(), offsets.data(), dest.data(),
               scratch.data(), nullptr);
  device_sync();
  const auto plan = ref::permute_plan(idx, experts);
  CHECK(counts.download() == plan.counts);
  CHECK(offsets.download() == plan.offsets);
  CHECK(dest.download() == plan.dest_row);

  auto dx = to_device(x);
  auto xp = poisoned<bf16_bits>(idx.size() * static_cast<size_t>(cols));
  permute_rows(dx.data(), dest.data(), static_cast<int64_t>(idx.size()), top_k, cols, xp.data(), nullptr);
  device_sync();
  const auto got = xp.download();
  bool exact = true;
  for (size_t a = 0; a < idx.size(); ++a) {
    const size_t t = a / top_k;
    for (int64_t c = 0; c < cols; ++c) {
      exact = exact && got[static_cast<size_t>(plan.dest_row[a]) * static_cast<size_t>(cols) + static_cast<size_t>(c)] ==
                           x[t * static_cast<size_t>(cols) + static_cast<size_t>(c)];
    }
  }
  CHECK(exact);  // a copy: bit for bit

  const auto yp = random_bf16(idx.size() * static_cast<size_t>(cols));
  auto dyp = to_device(yp);
  auto dwts = to_device(weights);
  auto y = poisoned<bf16_bits>(static_cast<size_t>(tokens * cols));
  unpermute_combine(dyp.data(), dest.data(), dwts.data(), tokens, top_k, cols, y.data(), nullptr);
  device_sync();
  const auto ref = ref::unpermute_combine(yp, plan.dest_row, weights, tokens, top_k, cols);
  std::vector<double> mag(ref.size(), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const size_t a = static_cast<size_t>(t * top_k + j);
      for (int64_t c = 0; c < cols; ++c) {
        mag[static_cast<size_t>(t * cols + c)] +=
            std::abs(weights[a] * bf16_to_float(yp[static_cast<size_t>(plan.dest_row[a]) * static_cast<size_t>(cols) + static_cast<size_t>(c)]));
      }
    }
  }
  check_bf16("unpermute", y.download(), ref, [&](size_t i) { return u16 * std::abs(ref[i]) + 2 * (top_k + 1) * u32 * mag[i]; });
  }
}

TEST_CASE("cross-entropy: the fused kernel, and the chunked LM-head loss against the full one") {
  const int64_t rows = 40, vocab = 3000;
  const auto logits = random_bf16(static_cast<size_t>(rows * vocab), -6, 6);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  for (auto& t : targets) t = pick(rng());
  const float scale = 1.0f / static_cast<float>(rows);
  auto dl = to_device(logits);
  auto dt = to_device(targets);
  auto loss = poisoned<float>(static_cast<size_t>(rows));
  auto dlogits = poisoned<bf16_bits>(logits.size());
  cross_entropy(dl.data(), dt.data(), rows, vocab, scale, loss.data(), dlogits.data(), nullptr);
  device_sync();
  const auto ref = ref::cross_entropy(ref::to_double(logits), targets, rows, vocab, scale);
  const double v = static_cast<double>(vocab);
  // log of an FP32 sum of `vocab` exponentials, plus the max and the target logit (|x| <= 6).
  check_f32("loss", loss.download(), ref.loss, [&](size_t) { return (v + 32) * u32 + 64 * u32 * 6; });
  std::vector<double> p(ref.dlogits.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const bool onehot = targets[i / static_cast<size_t>(vocab)] == static_cast<int32_t>(i % static_cast<size_t>(vocab));
    p[i] = ref.dlogits[i] / scale + (onehot ? 1.0 : 0.0);
  }
  check_bf16("dlogits", dlogits.download(), ref.dlogits,
             [&](size_t i) { return u16 * std::abs(ref.dlogits[i]) + scale * (v + 64) * u32 * p[i]; });

  // LM head: h [rows, hidden], W [vocab, hidden]; chunks of 16 rows (the last one partial) vs all rows.
  Gemm gemm;
  const int64_t hidden = 128;
  const auto h = random_bf16(static_cast<size_t>(rows * hidden));
  const auto w = random_bf16(static_cast<size_t>(vocab * hidden), -0.5, 0.5);
  std::vector<double> mag;
  const auto zref = ref::gemm(h, w, rows, vocab, hidden, false, true, &mag);
  const auto ce = ref::cross_entropy(zref, targets, rows, vocab, scale);
  auto dh_in = to_device(h);
  auto dw_in = to_device(w);
  for (int64_t chunk : {rows, int64_t{16}}) {
    CAPTURE(chunk);
    DeviceBuffer<bf16_bits> lbuf(static_cast<size_t>(chunk * vocab)), dlbuf(static_cast<size_t>(chunk * vocab));
    auto closs = poisoned<float>(static_cast<size_t>(rows));
    auto dh = poisoned<bf16_bits>(h.size());
    auto dw = poisoned<float>(w.size());
    chunked_cross_entropy(gemm, dh_in.data(), dw_in.data(), dt.data(), rows, hidden, vocab, chunk, scale,
                          {lbuf.data(), dlbuf.data()}, closs.data(), dh.data(), dw.data(), nullptr);
    device_sync();
    double zmax = 0;
    for (double z : zref) zmax = std::max(zmax, std::abs(z));
    double magmax = 0;
    for (double m : mag) magmax = std::max(magmax, m);
    // Logits are stored in BF16: each moves by up to 2^-8 |z| (plus FP32 accumulation), which moves
    // the loss by at most twice the largest such change.
    const double dz = u16 * zmax + 2 * static_cast<double>(hidden) * u32 * magmax;
    check_f32("chunked loss", closs.download(), ce.loss, [&](size_t) { return 2 * dz * 1.01 + (v + 32) * u32 * 8; });
    // Gradients: each softmax probability moves by p (2 dz + its own rounding); dh and dw are sums of
    // such terms times the other operand, accumulated in FP32.
    const double dp_rel = 2 * dz + u16 + (v + 64) * u32;
    std::vector<double> pe(ce.dlogits.size());
    for (size_t i = 0; i < pe.size(); ++i) {
      const bool onehot = targets[i / static_cast<size_t>(vocab)] == static_cast<int32_t>(i % static_cast<size_t>(vocab));
      pe[i] = ce.dlogits[i] / scale + (onehot ? 2.0 : 0.0);  // |p - onehot| <= p + onehot
    }
    std::vector<double> dh_ref(h.size(), 0.0), dh_mag(h.size(), 0.0), dh_p(h.size(), 0.0);
    std::vector<double> dw_ref(w.size(), 0.0), dw_mag(w.size(), 0.0), dw_p(w.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < vocab; ++t) {
        const size_t i = static_cast<size_t>(r * vocab + t);
        const double g = ce.dlogits[i];
        for (int64_t c = 0; c < hidden; ++c) {
          const double wv = bf16_to_float(w[static_cast<size_t>(t * hidden + c)]);
          const double hv = bf16_to_float(h[static_cast<size_t>(r * hidden + c)]);
          dh_ref[static_cast<size_t>(r * hidden + c)] += g * wv;
          dh_mag[static_cast<size_t>(r * hidden + c)] += std::abs(g * wv);
          dh_p[static_cast<size_t>(r * hidden + c)] += scale * pe[i] * std::abs(wv);
          dw_ref[static_cast<size_t>(t * hidden + c)] += g * hv;
          dw_mag[static_cast<size_t>(t * hidden + c)] += std::abs(g * hv);
          dw_p[static_cast<size_t>(t * hidden + c)] += scale * pe[i] * std::abs(hv);
        }
      }
    }
    check_bf16("chunked dh", dh.download(), dh_ref, [&](size_t i) {
      return u16 * std::abs(dh_ref[i]) + dp_rel * dh_p[i] + 2 * (v + 1) * u32 * dh_mag[i];
    });
    check_f32("chunked dw", dw.download(), dw_ref, [&](size_t i) {
      return u32 * std::abs(dw_ref[i]) + dp_rel * dw_p[i] + 2 * (static_cast<double>(rows) + 1) * u32 * dw_mag[i];
    });
  }
}

TEST_CASE("AdamW: three steps against the double-precision update") {
  const size_t n = 10007;
  const auto w0 = random_f32(n);
  AdamWConfig cfg;
  cfg.lr = 1e-3;
  ref::AdamWState st{as_double(w0), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  auto master = to_device(w0);
  DeviceBuffer<float> m(n), v(n);
  m.fill_bytes(0);
  v.fill_bytes(0);
  auto param = poisoned<bf16_bits>(n);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto g = random_f32(n, -0.1, 0.1);
    auto dg = to_device(g);
    cfg.step = step;
    adamw_step(master.data(), dg.data(), m.data(), v.data(), param.data(), static_cast<int64_t>(n), cfg, nullptr);
    ref::adamw_step(st, g, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, step);
  }
  device_sync();
  // Each step's update has at most 1.0 + wd relative size times lr; FP32 ops add a few ulp per step.
  const auto bound = [&](size_t i) { return 3 * (8 * u32 * std::abs(st.master[i]) + cfg.lr * 32 * u32 * 2); };
  check_f32("adamw master", master.download(), st.master, bound);
  check_f32("adamw m", m.download(), st.m, [&](size_t i) { return 16 * u32 * (std::abs(st.m[i]) + 0.1); });
  check_f32("adamw v", v.download(), st.v, [&](size_t i) { return 16 * u32 * (std::abs(st.v[i]) + 0.01); });
  check_bf16("adamw bf16 params", param.download(), st.master,
             [&](size_t i) { return u16 * std::abs(st.master[i]) + bound(i); });

  // Without a BF16 copy (FSDP2 mixed precision): the same FP32 update, nothing else written.
  auto master2 = to_device(w0);
  m.fill_bytes(0);
  v.fill_bytes(0);
  const auto g = random_f32(n, -0.1, 0.1);
  auto dg = to_device(g);
  cfg.step = 1;
  adamw_step(master2.data(), dg.data(), m.data(), v.data(), nullptr, static_cast<int64_t>(n), cfg, nullptr);
  device_sync();
  ref::AdamWState st2{as_double(w0), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  ref::adamw_step(st2, g, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, 1);
  check_f32("adamw master, no bf16 copy", master2.download(), st2.master,
            [&](size_t i) { return 8 * u32 * std::abs(st2.master[i]) + cfg.lr * 32 * u32 * 2; });
}

TEST_CASE("LoRA adapter: y += scale (x A^T) B^T") {
  Gemm gemm;
  const int64_t rows = 96, n = 160, k = 256, rank = 16;
  const float scale = 2.0f;
  const auto x = random_bf16(static_cast<size_t>(rows * k));
  const auto a = random_bf16(static_cast<size_t>(rank * k));
  const auto b = random_bf16(static_cast<size_t>(n * rank));
  const auto y0 = random_bf16(static_cast<size_t>(rows * n));
  auto dx = to_device(x);
  auto da = to_device(a);
  auto db = to_device(b);
  auto dy = to_device(y0);
  auto tmp = poisoned<bf16_bits>(static_cast<size_t>(rows * rank));
  lora_forward(gemm, dx.data(), da.data(), db.data(), tmp.data(), dy.data(), rows, n, k, rank, scale, nullptr);
  device_sync();
  std::vector<double> tmag;
  const auto t = ref::gemm(x, a, rows, rank, k, false, true, &tmag);
  std::vector<double> ref(y0.size()), bound(y0.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0, mag = 0;
      for (int64_t r = 0; r < rank; ++r) {
        const double bv = bf16_to_float(b[static_cast<size_t>(j * rank + r)]);
        acc += t[static_cast<size_t>(i * rank + r)] * bv;
        mag += tmag[static_cast<size_t>(i * rank + r)] * std::abs(bv);
      }
      const size_t o = static_cast<size_t>(i * n + j);
      const double yin = bf16_to_float(y0[o]);
      ref[o] = yin + scale * acc;
      // The BF16 intermediate (one rounding of a k-term FP32 sum), then a (rank + 1)-term FP32 sum, then BF16.
      bound[o] = u16 * std::abs(ref[o]) + 2 * scale * (u16 + (static_cast<double>(k + rank) + 2) * u32) * mag +
                 2 * u32 * std::abs(yin);
    }
  }
  check_bf16("lora y", dy.download(), ref, [&](size_t i) { return bound[i]; });
}

TEST_CASE("swap out to pinned host memory and back is bit-exact") {
  const size_t n = (size_t{3} << 20) + 17;
  const auto x = random_bf16(n);
  auto dx = to_device(x);
  PinnedBuffer<bf16_bits> host(n);
  std::fill(host.data(), host.data() + n, bf16_nan());
  cudaStream_t s = nullptr;
  MOESIM_CUDA_CHECK(cudaStreamCreate(&s));
  swap_out(dx.data(), host.data(), n * sizeof(bf16_bits), s);
  auto back = poisoned<bf16_bits>(n);
  swap_in(host.data(), back.data(), n * sizeof(bf16_bits), s);
  MOESIM_CUDA_CHECK(cudaStreamSynchronize(s));
  MOESIM_CUDA_CHECK(cudaStreamDestroy(s));
  CHECK(std::equal(host.data(), host.data() + n, x.begin()));
  CHECK(back.download() == x);
}
