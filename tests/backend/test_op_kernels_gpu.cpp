// SPDX-License-Identifier: MIT
// The executor's own kernels (op_kernels.hpp exec_kernels: the embedding gather and its
// gradient's scatter-add, KDA's depthwise short convolution both ways, the Attention Residuals
// mix and its gradient, GQA's key/value head expansion and its adjoint, the copies' traffic) against their CPU references (reference.hpp) on fresh random inputs;
// outputs poisoned with NaN first, except the scatter-add, which accumulates onto random values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/op_kernels.hpp"
#include "backend/cuda/reference.hpp"
#include "gpu_test_util.hpp"
#include "test_util.hpp"

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

// Token ids over a small table, so that rows repeat (the scatter-add's atomics collide), with a
// few out of range on both sides (clamped).
std::vector<int32_t> random_ids(size_t n, int32_t table_rows) {
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> d(-2, table_rows + 1);
  for (auto& x : ids) x = d(rng());
  return ids;
}

}  // namespace

TEST_CASE("embedding: gather rows, and the table gradient's scatter-add") {
  const int64_t rows = 777, cols = 136, table_rows = 50;
  const auto table = random_bf16(static_cast<size_t>(table_rows * cols));
  const auto ids = random_ids(static_cast<size_t>(rows), static_cast<int32_t>(table_rows));
  auto dtable = to_device(table);
  auto dids = to_device(ids);
  auto out = poisoned<bf16_bits>(static_cast<size_t>(rows * cols));
  exec_kernels::gather_rows(dtable.data(), dids.data(), rows, cols, table_rows, out.data(), nullptr);
  device_sync();
  const auto gr = ref::gather_rows(table, ids, cols, table_rows);
  check_bf16("gather", out.download(), gr, [](size_t) { return 0.0; });  // a copy: exact

  const auto dy = random_bf16(static_cast<size_t>(rows * cols));
  const auto grad0 = random_f32(static_cast<size_t>(table_rows * cols));
  auto ddy = to_device(dy);
  auto grad = to_device(grad0);
  exec_kernels::scatter_add_rows(ddy.data(), dids.data(), rows, cols, table_rows, grad.data(), nullptr);
  device_sync();
  const auto sr = ref::scatter_add_rows(grad0, dy, ids, cols, table_rows);
  // FP32 sums in any order: each addition rounds once, bounded by u32 x (number of terms) x the
  // sum of magnitudes into that element.
  std::vector<double> mag(grad0.begin(), grad0.end()), terms(grad0.size(), 1.0);
  for (auto& m : mag) m = std::abs(m);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t dst = std::clamp<int64_t>(ids[static_cast<size_t>(r)], 0, table_rows - 1);
    for (int64_t c = 0; c < cols; ++c) {
      mag[static_cast<size_t>(dst * cols + c)] += std::abs(bf16_to_float(dy[static_cast<size_t>(r * cols + c)]));
      terms[static_cast<size_t>(dst * cols + c)] += 1;
    }
  }
  check_f32("scatter-add", grad.download(), sr, [&](size_t i) { return u32 * terms[i] * mag[i]; });
}

TEST_CASE("short convolution forward and transposed: tiles (widths 4 and 3), and the per-element kernel") {
  // 96 channels: the tiled kernel (8 channels a thread, 32-row tiles, 301 rows: a partial last
  // tile); 100 channels (not a multiple of 8) and width 2: the per-element kernel.
  for (const auto& [width, channels] : {std::pair<int, int64_t>{4, 96}, {3, 96}, {4, 100}, {2, 96}}) {
    CAPTURE(width);
    CAPTURE(channels);
    const int64_t rows = 301;
    const auto x = random_bf16(static_cast<size_t>(rows * channels));
    const auto w = random_bf16(static_cast<size_t>(channels * width));
    auto dx = to_device(x);
    auto dw = to_device(w);
    for (const bool transposed : {false, true}) {
      CAPTURE(transposed);
      auto y = poisoned<bf16_bits>(x.size());
      exec_kernels::short_conv(dx.data(), dw.data(), rows, channels, width, transposed, y.data(), nullptr);
      device_sync();
      const auto yr = ref::short_conv(x, w, rows, channels, width, transposed);
      // One BF16 rounding of an FP32 sum of `width` products of magnitude <= 1.
      check_bf16("short conv", y.download(), yr, [&](size_t i) { return u16 * std::abs(yr[i]) + 2 * width * u32; });
    }
  }
}

TEST_CASE("Attention Residuals mix and its input gradients") {
  // 5000: 8 elements a thread (16-byte accesses); 5001: one a thread.
  for (const auto& [n, sources] : {std::pair<int64_t, int>{5000, 1}, {5000, 3}, {5000, 8}, {5001, 3}}) {
    CAPTURE(n);
    CAPTURE(sources);
    const auto x = random_bf16(static_cast<size_t>(sources * n));
    const auto a = random_f32(static_cast<size_t>(sources), 0, 1);
    auto dxs = to_device(x);
    auto da = to_device(a);
    auto y = poisoned<bf16_bits>(static_cast<size_t>(n));
    exec_kernels::residual_mix(dxs.data(), da.data(), sources, n, y.data(), nullptr);
    const auto dy = random_bf16(static_cast<size_t>(n));
    auto ddy = to_device(dy);
    auto dx = poisoned<bf16_bits>(x.size());
    exec_kernels::residual_mix_backward(ddy.data(), da.data(), sources, n, dx.data(), nullptr);
    device_sync();
    const auto yr = ref::residual_mix(x, a, n);
    check_bf16("mix", y.download(), yr, [&](size_t i) { return u16 * std::abs(yr[i]) + 2 * sources * u32; });
    const auto dxr = ref::residual_mix_backward(dy, a);
    check_bf16("mix backward", dx.download(), dxr, [&](size_t i) { return u16 * std::abs(dxr[i]) + u32; });
  }
}

TEST_CASE("GQA key/value heads expanded to the query heads, and the gradient summed back over each group") {
  // Llama's grouping (4 query heads per key/value head) and MQA's (one key/value head), at a row
  // count that is not a multiple of the block.
  for (const auto& [heads_kv, group] : {std::pair<int64_t, int>{2, 4}, std::pair<int64_t, int>{1, 8}}) {
    CAPTURE(heads_kv);
    CAPTURE(group);
    const int64_t rows = 333, d = 128, hq = heads_kv * group;
    const auto x = random_bf16(static_cast<size_t>(rows * heads_kv * d));
    auto dx_in = to_device(x);
    auto y = poisoned<bf16_bits>(static_cast<size_t>(rows * hq * d));
    exec_kernels::repeat_kv_heads(dx_in.data(), rows, heads_kv, group, d, y.data(), nullptr);
    const auto dy = random_f32(static_cast<size_t>(rows * hq * d));
    auto ddy = to_device(dy);
    auto dx = poisoned<float>(static_cast<size_t>(rows * heads_kv * d));
    exec_kernels::sum_kv_head_groups(ddy.data(), rows, heads_kv, group, d, dx.data(), nullptr);
    device_sync();
    const auto yr = ref::repeat_kv_heads(x, rows, heads_kv, group, d);
    check_bf16("repeat kv heads", y.download(), yr, [](size_t) { return 0.0; });  // a copy: exact
    const auto dxr = ref::sum_kv_head_groups(dy, rows, heads_kv, group, d);
    // An FP32 sum of `group` terms of magnitude <= 1: each addition rounds once.
    check_f32("sum kv head groups", dx.download(), dxr, [&](size_t i) { return u32 * group * (std::abs(dxr[i]) + 1); });
  }
}

TEST_CASE("move_bytes: every input read and every output written, folded or widened") {
  // 6,000 -> 4,000: a cast from FP32 master weights plus a BF16 copy (6 bytes read, 4 written a
  // parameter), vectorised; 4,001 -> 1,000: an accumulation of four, scalar (odd count); 1,000 ->
  // 2,000 and 999 -> 2,003: widening casts; 777 -> 777: a plain copy.
  for (const auto& [n_in, n_out] : {std::pair<int64_t, int64_t>{6000, 4000}, {4001, 1000}, {1000, 2000}, {999, 2003}, {777, 777}}) {
    CAPTURE(n_in);
    CAPTURE(n_out);
    const auto x = random_bf16(static_cast<size_t>(n_in));
    auto dx = to_device(x);
    auto y = poisoned<bf16_bits>(static_cast<size_t>(n_out));
    exec_kernels::move_bytes(dx.data(), n_in, y.data(), n_out, nullptr);
    device_sync();
    const auto yr = ref::move_bytes(x, n_out);
    const double terms = static_cast<double>((n_in + n_out - 1) / n_out);
    // An FP32 sum of `terms` values of magnitude <= 1, rounded once to BF16; a widening copies exactly.
    check_bf16("move_bytes", y.download(), yr, [&](size_t i) { return u16 * std::abs(yr[i]) + terms * u32 * terms; });
  }
}
