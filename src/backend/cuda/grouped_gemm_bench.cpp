// SPDX-License-Identifier: MIT
// Expert GEMMs two ways on one GPU, in one run: a loop of autotuned cuBLASLt calls
// (expert_gemm_loop) and one call of cuBLAS's grouped GEMM (GroupedGemm), and which of them the
// executor's grouped_gemm chose for the shape (Gemm::experts, timed on its first run). 14 experts (one EP64 rank of
// Kimi K3) at K3's expert shapes, forward (y = x W^T) and input-gradient (dx = dy W) layouts, from
// 64 to 8,192 rows per expert; median of 20 timed calls after 3 warm-ups (timer.hpp), inputs
// rotated over two sets. Prints a markdown table; bench/grouped_gemm_device.sh runs it next to
// torch._grouped_mm (bench/grouped_gemm_reference.py).
//   grouped_gemm_bench [--quick]
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/timer.hpp"

using namespace moesim::cuda;

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  constexpr int kExperts = 14;
  constexpr int64_t kLatent = 3584, kExpertWidth = 3072;  // K3's expert input and intermediate widths
  struct Shape {
    const char* name;
    int64_t n, k;
    Trans tb;
  };
  const std::vector<Shape> shapes = {{"gate|up fwd", 2 * kExpertWidth, kLatent, Trans::transpose},
                                     {"down fwd", kLatent, kExpertWidth, Trans::transpose},
                                     {"down dx", kExpertWidth, kLatent, Trans::none}};
  const std::vector<int32_t> per_expert = quick ? std::vector<int32_t>{64, 512, 4096}
                                                : std::vector<int32_t>{64, 128, 256, 512, 1024, 2048, 4096, 8192};
  const int64_t max_rows = static_cast<int64_t>(per_expert.back()) * kExperts;
  const int64_t max_width = 2 * kExpertWidth;
  DeviceBuffer<bf16_bits> w(static_cast<size_t>(kExperts) * 2 * kExpertWidth * kLatent * 2);  // two sets
  DeviceBuffer<bf16_bits> x(static_cast<size_t>(max_rows * max_width * 2));
  DeviceBuffer<bf16_bits> y(static_cast<size_t>(max_rows * max_width));
  cudaStream_t stream = nullptr;
  fill_uniform(w.data(), static_cast<int64_t>(w.size()), 11, -1.0f, 1.0f, stream);
  fill_uniform(x.data(), static_cast<int64_t>(x.size()), 12, -1.0f, 1.0f, stream);
  Gemm gemm;
  GroupedGemm grouped;
  std::printf("| shape | rows/expert | n | k | loop of cuBLASLt: us | TFLOP/s | cuBLAS grouped: us | TFLOP/s | grouped / loop | executor's choice |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    for (const int32_t rows : per_expert) {
      const std::vector<int32_t> counts(kExperts, rows);
      const int64_t set_w = static_cast<int64_t>(kExperts) * s.n * s.k, set_x = max_rows * max_width;
      const auto time = [&](auto&& call) {
        return time_on_stream(stream, 3, 20, [&](int i) {
          const int set = i % 2;
          call(x.data() + set * set_x, w.data() + set * set_w);
        });
      };
      const Timing loop = time([&](const bf16_bits* xs, const bf16_bits* ws) {
        expert_gemm_loop(gemm, counts, s.n, s.k, s.tb, xs, ws, s.n * s.k, y.data(), stream);
      });
      const Timing one = time([&](const bf16_bits* xs, const bf16_bits* ws) {
        grouped.run(counts, s.n, s.k, s.tb, xs, ws, s.n * s.k, y.data(), stream);
      });
      grouped_gemm(gemm, counts, s.n, s.k, s.tb, x.data(), w.data(), s.n * s.k, y.data(), stream);
      const bool chose_grouped = gemm.expert_way(counts, s.n, s.k, s.tb) == Gemm::ExpertWay::grouped;
      const double flops = 2.0 * static_cast<double>(rows) * kExperts * static_cast<double>(s.n * s.k);
      std::printf("| %s | %d | %lld | %lld | %.1f | %.1f | %.1f | %.1f | %.3f | %s |\n", s.name, rows,
                  static_cast<long long>(s.n), static_cast<long long>(s.k), loop.median_s * 1e6,
                  flops / loop.median_s / 1e12, one.median_s * 1e6, flops / one.median_s / 1e12,
                  one.median_s / loop.median_s, chose_grouped ? "grouped" : "loop");
      std::fflush(stdout);
    }
  }
  return 0;
}
