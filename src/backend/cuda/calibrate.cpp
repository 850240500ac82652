// SPDX-License-Identifier: MIT
#include "backend/cuda/calibrate.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/calibrate_attention.hpp"
#include "backend/cuda/calibrate_cce.hpp"
#include "backend/cuda/calibrate_launch.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/collective_table.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/host_copy.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/nccl_group.hpp"
#include "backend/cuda/op_kernels.hpp"
#include "backend/cuda/timer.hpp"
#include "backend/rank_bootstrap.hpp"
#include "core/json_input.hpp"
#include "cost/calibration.hpp"
#include "graph/step_graph.hpp"

namespace moesim::cuda {
namespace {

using nlohmann::json;

struct Settings {
  int warmup;
  int repeats;
};

// Kimi K3 dimensions (models/kimi-k3.json): hidden 7168, latent 3584, expert width 3072, KDA
// projection width 96 x 128 = 12288, vocab 163840; one EP64 rank holds 896 / 64 = 14 experts.
constexpr int64_t kHidden = 7168;
constexpr int64_t kLatent = 3584;
constexpr int64_t kExpertWidth = 3072;
constexpr int64_t kProjection = 12288;
constexpr int kExpertsPerRank = 14;
constexpr int kNumExperts = 896;
constexpr int kTopK = 16;

// A pool of random BF16 values much larger than the 60 MB L2; repeat i reads a different slice.
class Pool {
 public:
  Pool(size_t elements, uint64_t seed) : buf_(elements) {
    fill_uniform(buf_.data(), static_cast<int64_t>(elements), seed, -1.0f, 1.0f, nullptr);
    MOESIM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // A slice of `n` elements for repeat `i`, 256-byte aligned, wrapping around the pool.
  bf16_bits* slice(size_t n, int i) {
    if (n > buf_.size()) throw BackendError("calibration pool too small for this shape");
    const size_t stride = (n + 127) / 128 * 128;
    if (stride >= buf_.size()) return buf_.data();
    const size_t slots = buf_.size() / stride;
    return buf_.data() + (static_cast<size_t>(i) % slots) * stride;
  }
  size_t size() const { return buf_.size(); }

 private:
  DeviceBuffer<bf16_bits> buf_;
};

// The current device's peak memory bandwidth as it reports it: 2 transfers per memory clock
// (DDR) x the bus width. Not a datasheet figure: it follows the GPU the calibration runs on.
double device_hbm_peak() {
  int device = 0, clock_khz = 0, bus_bits = 0;
  MOESIM_CUDA_CHECK(cudaGetDevice(&device));
  MOESIM_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  MOESIM_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return 2.0 * static_cast<double>(clock_khz) * 1e3 * static_cast<double>(bus_bits) / 8.0;
}

struct Context {
  const CalibrateOptions& opt;
  Settings s;
  cudaStream_t stream = nullptr;
  std::string summary;
  int64_t planned = 0;  // measurements this run makes (the plan's count)
  int64_t done = 0;
  void log(const std::string& line) const {
    if (opt.log) opt.log(line);
  }
  void measured() {
    ++done;
    if (opt.progress) opt.progress(done, std::max(planned, done));
  }
};

// The grids, read by the plan (how many measurements a run makes) and by the benchmarks.

std::vector<GemmShape> gemm_shapes(bool quick) {
  std::vector<GemmShape> shapes;
  const std::vector<int64_t> squares = quick ? std::vector<int64_t>{512, 4096}
                                             : std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192, 16384};
  for (int64_t s : squares) shapes.push_back({s, s, s, Trans::none, Trans::transpose, OutType::bf16});
  // Linear layers of K3 at token counts from decode-like skinny to long sequences.
  const std::vector<int64_t> tokens = quick ? std::vector<int64_t>{64, 4096}
                                            : std::vector<int64_t>{16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384};
  const std::vector<std::pair<int64_t, int64_t>> nk = {{kProjection, kHidden}, {kHidden, kProjection}, {kLatent, kHidden}};
  for (int64_t m : tokens) {
    for (auto [n, k] : nk) shapes.push_back({m, n, k, Trans::none, Trans::transpose, OutType::bf16});
  }
  return shapes;
}

// The linear layers whose GEMMs are measured pass by pass (kernels/gemm_shapes): those of the
// shipped calibration scenarios, at the tokens each runs and (full grid) at kLinearTokens, and those
// of --scenario when given.
constexpr std::array<const char*, 4> kLinearShapeScenarios = {
    "scenarios/calibration/k3-slice-1gpu.json", "scenarios/calibration/llama-8b-slice-1gpu.json",
    "scenarios/calibration/llama-8b-slice-1gpu-chunked.json", "scenarios/calibration/qwen3-moe-slice-1gpu.json"};
constexpr std::array<int64_t, 5> kLinearTokens = {1024, 2048, 4096, 8192, 16384};

struct LinearShape {
  int64_t n = 0, k = 0;
  std::set<int64_t> tokens;
};

// The dense BF16 linear layers (n, k) of the scenarios' step graphs, with the tokens they run.
std::vector<LinearShape> linear_shapes(const std::string& extra_scenario, bool quick) {
  std::vector<std::string> names(kLinearShapeScenarios.begin(), kLinearShapeScenarios.end());
  if (!extra_scenario.empty()) names.push_back(extra_scenario);
  std::map<std::pair<int64_t, int64_t>, std::set<int64_t>> by_shape;
  for (const std::string& name : names) {
    const Scenario s = load_scenario(read_input(name, "scenarios", "--scenario"));
    const StepGraph g = build_step_graph(s);
    for (const Program& p : g.programs) {
      for (const Op& op : p.ops) {
        if (op.kind != OpKind::gemm || op.dtype != Dtype::bf16 || op.num_groups > 0 || op.m <= 0 || op.n <= 0 || op.k <= 0) continue;
        by_shape[{op.n, op.k}].insert(op.m);
      }
    }
  }
  std::vector<LinearShape> out;
  for (auto& [nk, tokens] : by_shape) {
    if (!quick) tokens.insert(kLinearTokens.begin(), kLinearTokens.end());
    out.push_back({nk.first, nk.second, std::move(tokens)});
  }
  return out;
}

int64_t linear_measurements(const std::vector<LinearShape>& shapes) {
  int64_t n = 0;
  for (const LinearShape& s : shapes) n += 3 * static_cast<int64_t>(s.tokens.size());
  return n;
}

// The experts of one EP64 rank of K3 on the latent width: gate|up (n = 2 f, k = l) and down (n = l, k = f).
const std::vector<std::pair<int64_t, int64_t>> kGroupedNk = {{2 * kExpertWidth, kLatent}, {kLatent, kExpertWidth}};

std::vector<int64_t> grouped_rows_per_expert(bool quick) {
  return quick ? std::vector<int64_t>{512, 4096} : std::vector<int64_t>{64, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

std::vector<double> memory_copy_sizes(bool quick) {
  return quick ? std::vector<double>{16e6, 1e9} : std::vector<double>{1e6, 4e6, 16e6, 64e6, 256e6, 1e9};
}

// The kernels at K3 shapes each of bench_memory and bench_other times after its grid (each checks
// its list against these).
constexpr int64_t kMemoryKernelCases = 5;
constexpr int64_t kOtherKernelCases = 7;

std::vector<double> host_copy_sizes(bool quick) {
  return quick ? std::vector<double>{1 << 20, 256 << 20} : std::vector<double>{64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30};
}

// A benchmark's list of cases has the length the plan counted.
void check_planned(size_t cases, int64_t planned, const char* what) {
  if (static_cast<int64_t>(cases) != planned) {
    throw BackendError(std::string("calibrate: ") + what + " has " + std::to_string(cases) + " cases, the plan counts " +
                       std::to_string(planned));
  }
}

// time_on_stream at the GEMM duty cycle: one call timed alone sizes the idle gap after every call,
// (1 - duty) / duty of it, so the GPU is busy `duty` of the sweep.
Timing time_gemm(Context& cx, const std::function<void(int)>& enqueue) {
  if (cx.opt.gemm_duty >= 1) return time_on_stream(cx.stream, cx.s.warmup, cx.s.repeats, enqueue);
  const double call_s = time_on_stream(cx.stream, 1, 1, enqueue).median_s;
  const double gap_s = call_s * (1 - cx.opt.gemm_duty) / cx.opt.gemm_duty;
  return time_on_stream(cx.stream, cx.s.warmup, cx.s.repeats, enqueue, [&] { idle_gpu(gap_s, cx.stream); });
}

json bench_gemm(Context& cx, Gemm& gemm, Pool& pool, Pool& out_pool) {
  const std::vector<GemmShape> shapes = gemm_shapes(cx.opt.quick);
  std::map<double, std::vector<double>> by_x;
  json samples = json::array();
  cx.summary += "GEMM (bf16, cuBLASLt)            m      n      k   heuristic TF/s   best TF/s\n";
  for (const auto& sh : shapes) {
    const size_t na = static_cast<size_t>(sh.m * sh.k);
    const size_t nb = static_cast<size_t>(sh.n * sh.k);
    const size_t nc = static_cast<size_t>(sh.m * sh.n);
    const auto run = [&](int algo) {
      return time_gemm(cx, [&](int i) {
        gemm.run(sh, pool.slice(na + nb, i), pool.slice(na + nb, i) + na, out_pool.slice(nc, i), 1.0f, 0.0f, cx.stream,
                 algo);
      });
    };
    const Timing heuristic = run(0);
    double best_s = heuristic.median_s;
    const int num_algos = gemm.num_algorithms(sh);
    for (int a = 1; a < num_algos; ++a) {
      try {
        best_s = std::min(best_s, run(a).median_s);
      } catch (const BackendError&) {
        // An algorithm the heuristic ranks may still refuse this problem at run time; skip it.
      }
    }
    const double flops = sh.flops();
    const double x = static_cast<double>(std::min({sh.m, sh.n, sh.k}));
    // The table's one measure, min(m, n, k), stands for training GEMMs: K3's layers at any token
    // count and large squares. Small squares (a few MFLOP, bound by launch latency) would put a
    // 30 TFLOP/s point where training has skinny GEMMs at 600, so they are recorded only.
    const bool in_table = !(sh.m == sh.n && sh.n == sh.k && sh.m < 2048);
    if (in_table) by_x[x].push_back(flops / heuristic.median_s);
    samples.push_back({{"m", sh.m}, {"n", sh.n}, {"k", sh.k}, {"seconds", heuristic.median_s},
                       {"flops_per_s", flops / heuristic.median_s}, {"best_flops_per_s", flops / best_s},
                       {"algorithms_tried", num_algos}, {"in_table", in_table}});
    cx.summary += fmt("                           %6.0f %6.0f %6.0f   %14.1f   %9.1f\n", static_cast<double>(sh.m),
                      static_cast<double>(sh.n), static_cast<double>(sh.k), flops / heuristic.median_s / 1e12,
                      flops / best_s / 1e12);
    cx.log(fmt("gemm %.0f x %.0f x %.0f: %.1f TFLOP/s", static_cast<double>(sh.m), static_cast<double>(sh.n),
               static_cast<double>(sh.k), flops / heuristic.median_s / 1e12));
    cx.measured();
  }
  json t = calibration_table("min_mnk", "flops_per_s", by_x);
  t["dtype"] = "bf16";
  t["samples"] = samples;
  return t;
}

// Each linear layer's GEMMs in the layouts the executor runs them (op_kernels.cpp, gemm()), at the
// heuristic's algorithm as the executor does: {"PASS": {"N:K": table of FLOP/s by tokens}}.
json bench_gemm_shapes(Context& cx, Gemm& gemm, Pool& pool, Pool& out_pool, const std::vector<LinearShape>& shapes) {
  json out = json::object();
  cx.summary += "\nLinear layers (bf16, cuBLASLt)      n      k  tokens   forward TF/s  input_grad  weight_grad\n";
  for (const LinearShape& sh : shapes) {
    std::array<std::map<double, std::vector<double>>, 3> by_tokens;
    for (int64_t m : sh.tokens) {
      const std::array<GemmShape, 3> runs = {GemmShape{m, sh.n, sh.k, Trans::none, Trans::transpose, OutType::bf16},
                                             GemmShape{m, sh.k, sh.n, Trans::none, Trans::none, OutType::bf16},
                                             GemmShape{sh.n, sh.k, m, Trans::transpose, Trans::none, OutType::bf16}};
      std::array<double, 3> rate{};
      for (size_t pass = 0; pass < runs.size(); ++pass) {
        const GemmShape& g = runs[pass];
        const size_t na = static_cast<size_t>(g.m * g.k), nb = static_cast<size_t>(g.n * g.k), nc = static_cast<size_t>(g.m * g.n);
        if (na + nb > pool.size() || nc > out_pool.size()) {  // beyond the pools: left out of the table
          cx.log(fmt("linear %.0f x %.0f at %.0f tokens: too large for the pools, not measured", static_cast<double>(sh.n),
                     static_cast<double>(sh.k), static_cast<double>(m)));
          cx.measured();
          continue;
        }
        const Timing t = time_gemm(cx, [&](int i) {
          gemm.run(g, pool.slice(na + nb, i), pool.slice(na + nb, i) + na, out_pool.slice(nc, i), 1.0f, 0.0f, cx.stream);
        });
        rate[pass] = g.flops() / t.median_s;
        by_tokens[pass][static_cast<double>(m)].push_back(rate[pass]);
        cx.measured();
      }
      char line[160];
      std::snprintf(line, sizeof line, "                              %6lld %6lld %7lld   %12.1f  %10.1f  %11.1f\n",
                    static_cast<long long>(sh.n), static_cast<long long>(sh.k), static_cast<long long>(m), rate[0] / 1e12,
                    rate[1] / 1e12, rate[2] / 1e12);
      cx.summary += line;
      std::snprintf(line, sizeof line, "linear %lld x %lld at %lld tokens: %.1f / %.1f / %.1f TFLOP/s", static_cast<long long>(sh.n),
                    static_cast<long long>(sh.k), static_cast<long long>(m), rate[0] / 1e12, rate[1] / 1e12, rate[2] / 1e12);
      cx.log(line);
    }
    for (size_t pass = 0; pass < by_tokens.size(); ++pass) {
      if (by_tokens[pass].empty()) continue;
      const std::string name(enum_name(static_cast<GemmPass>(pass)));
      out[name][std::to_string(sh.n) + ":" + std::to_string(sh.k)] = calibration_table("tokens", "flops_per_s", by_tokens[pass]);
    }
  }
  return out;
}

json bench_grouped_gemm(Context& cx, Gemm& gemm) {
  const std::vector<int64_t> per_expert = grouped_rows_per_expert(cx.opt.quick);
  const auto& nk = kGroupedNk;
  const int64_t max_rows = per_expert.back() * kExpertsPerRank;
  const int64_t max_k = std::max(kLatent, kExpertWidth);
  DeviceBuffer<bf16_bits> w(static_cast<size_t>(kExpertsPerRank) * 2 * kExpertWidth * kLatent);  // > 600 MB: no L2 reuse
  DeviceBuffer<bf16_bits> x(static_cast<size_t>(max_rows * max_k));
  DeviceBuffer<bf16_bits> y(static_cast<size_t>(max_rows * 2 * kExpertWidth));
  fill_uniform(w.data(), static_cast<int64_t>(w.size()), 11, -1.0f, 1.0f, cx.stream);
  fill_uniform(x.data(), static_cast<int64_t>(x.size()), 12, -1.0f, 1.0f, cx.stream);
  std::map<double, std::vector<double>> by_x;
  json samples = json::array();
  cx.summary += "\nGrouped GEMM (14 experts)   rows/expert      n      k   TF/s\n";
  for (int64_t rows : per_expert) {
    for (auto [n, k] : nk) {
      const std::vector<int32_t> counts(kExpertsPerRank, static_cast<int32_t>(rows));
      const Timing t = time_gemm(cx, [&](int) {
        grouped_gemm(gemm, counts, n, k, Trans::transpose, x.data(), w.data(), n * k, y.data(), cx.stream);
      });
      const double flops = 2.0 * static_cast<double>(rows * kExpertsPerRank) * static_cast<double>(n * k);
      by_x[static_cast<double>(rows)].push_back(flops / t.median_s);
      samples.push_back({{"groups", kExpertsPerRank}, {"rows_per_group", rows}, {"n", n}, {"k", k},
                         {"seconds", t.median_s}, {"flops_per_s", flops / t.median_s}});
      cx.summary += fmt("                            %11.0f %6.0f %6.0f  %5.1f\n", static_cast<double>(rows),
                        static_cast<double>(n), static_cast<double>(k), flops / t.median_s / 1e12);
      cx.log(fmt("grouped gemm %.0f rows/expert n %.0f k %.0f: %.1f TFLOP/s", static_cast<double>(rows),
                 static_cast<double>(n), static_cast<double>(k), flops / t.median_s / 1e12));
      cx.measured();
    }
  }
  json tb = calibration_table("rows_per_group", "flops_per_s", by_x);
  tb["dtype"] = "bf16";
  tb["samples"] = samples;
  return tb;
}

// Memory-bound kernels. The table is the copy kernel's bandwidth by bytes moved (read + write):
// what a well-written memory-bound kernel reaches. The backend's own kernels at K3 shapes are
// recorded beside it (samples) with their fraction of that bandwidth.
json bench_memory(Context& cx, Pool& pool, Pool& out_pool) {
  std::map<double, std::vector<double>> by_x;
  json samples = json::array();
  cx.summary += "\nMemory-bound kernels          bytes moved      GB/s\n";
  for (double bytes : memory_copy_sizes(cx.opt.quick)) {
    const auto n = static_cast<int64_t>(bytes / 4);  // copy reads and writes n BF16 values: 4n bytes
    const Timing t = time_on_stream(cx.stream, cx.s.warmup, cx.s.repeats, [&](int i) {
      copy(pool.slice(static_cast<size_t>(n), i), out_pool.slice(static_cast<size_t>(n), i), n, cx.stream);
    });
    const double moved = 4.0 * static_cast<double>(n);
    by_x[moved].push_back(moved / t.median_s);
    samples.push_back({{"kernel", "copy"}, {"bytes", moved}, {"seconds", t.median_s}, {"bytes_per_s", moved / t.median_s}});
    cx.summary += fmt("  copy                        %11.3g  %8.1f\n", moved, moved / t.median_s / 1e9);
    cx.measured();
  }
  // K3 shapes: 4096 tokens x hidden 7168 (norm, add), x expert width 3072 (SwiGLU on 14 experts' rows).
  const int64_t rows = 4096;
  const int64_t cols = kHidden;
  const size_t nx = static_cast<size_t>(rows * cols);
  DeviceBuffer<bf16_bits> w(static_cast<size_t>(cols));
  fill_uniform(w.data(), cols, 21, 0.5f, 1.5f, cx.stream);
  DeviceBuffer<float> rstd(static_cast<size_t>(rows));
  DeviceBuffer<float> dw(static_cast<size_t>(cols));
  DeviceBuffer<float> dw_scratch(static_cast<size_t>(std::max<int64_t>(1, rmsnorm_backward_scratch_floats(rows, cols))));
  struct Case {
    std::string name;
    double bytes;
    std::function<void(int)> run;
  };
  const int64_t f_rows = 16384;
  std::vector<Case> cases = {
      {"add [4096 x 7168]", 3.0 * 2 * static_cast<double>(nx),
       [&](int i) { add(pool.slice(2 * nx, i), pool.slice(2 * nx, i) + nx, out_pool.slice(nx, i), static_cast<int64_t>(nx), cx.stream); }},
      {"rmsnorm fwd [4096 x 7168]", 2.0 * 2 * static_cast<double>(nx),
       [&](int i) { rmsnorm_forward(pool.slice(nx, i), w.data(), out_pool.slice(nx, i), rstd.data(), rows, cols, 1e-6f, cx.stream); }},
      {"rmsnorm bwd [4096 x 7168]", 3.0 * 2 * static_cast<double>(nx),
       [&](int i) {
         rmsnorm_backward(pool.slice(2 * nx, i), w.data(), rstd.data(), pool.slice(2 * nx, i) + nx, out_pool.slice(nx, i),
                          dw.data(), rows, cols, dw_scratch.data(), cx.stream);
       }},
      {"swiglu fwd [16384 x 2x3072]", 3.0 * 2 * static_cast<double>(f_rows * kExpertWidth),
       [&](int i) {
         swiglu_forward(pool.slice(static_cast<size_t>(f_rows * 2 * kExpertWidth), i),
                        out_pool.slice(static_cast<size_t>(f_rows * kExpertWidth), i), f_rows, kExpertWidth, cx.stream);
       }},
      {"swiglu bwd [16384 x 2x3072]", 5.0 * 2 * static_cast<double>(f_rows * kExpertWidth),
       [&](int i) {
         swiglu_backward(pool.slice(static_cast<size_t>(f_rows * 3 * kExpertWidth), i),
                         pool.slice(static_cast<size_t>(f_rows * 3 * kExpertWidth), i) + f_rows * 2 * kExpertWidth,
                         out_pool.slice(static_cast<size_t>(f_rows * 2 * kExpertWidth), i), f_rows, kExpertWidth,
                         cx.stream);
       }},
  };
  check_planned(cases.size(), kMemoryKernelCases, "the memory-bound benchmark");
  const double hbm_peak = device_hbm_peak();  // for the roofline column only
  for (auto& c : cases) {
    const Timing t = time_on_stream(cx.stream, cx.s.warmup, cx.s.repeats, c.run);
    samples.push_back({{"kernel", c.name}, {"bytes", c.bytes}, {"seconds", t.median_s}, {"bytes_per_s", c.bytes / t.median_s},
                       {"fraction_of_device_hbm_peak", c.bytes / t.median_s / hbm_peak}});
    cx.summary += "  " + c.name + fmt(": %.3g B, %.1f GB/s (%.2f of the device's %.2f TB/s)\n", c.bytes,
                                      c.bytes / t.median_s / 1e9, c.bytes / t.median_s / hbm_peak, hbm_peak / 1e12);
    cx.measured();
  }
  json tb = calibration_table("bytes", "bytes_per_s", by_x);
  tb["samples"] = samples;
  return tb;
}

// Router, permute, loss and optimizer at K3 shapes: recorded against their roofline (no table).
json bench_other(Context& cx, Gemm& gemm) {
  json samples = json::array();
  const int64_t tokens = 4096;
  DeviceBuffer<float> logits(static_cast<size_t>(tokens * kNumExperts));
  DeviceBuffer<bf16_bits> x(static_cast<size_t>(tokens * kHidden));
  DeviceBuffer<bf16_bits> wr(static_cast<size_t>(kNumExperts * kHidden));
  fill_uniform(x.data(), static_cast<int64_t>(x.size()), 31, -1.0f, 1.0f, cx.stream);
  fill_uniform(wr.data(), static_cast<int64_t>(wr.size()), 32, -0.05f, 0.05f, cx.stream);
  DeviceBuffer<float> bias(kNumExperts);
  MOESIM_CUDA_CHECK(cudaMemsetAsync(bias.data(), 0, bias.bytes(), cx.stream));
  DeviceBuffer<int32_t> idx(static_cast<size_t>(tokens * kTopK));
  DeviceBuffer<float> wts(static_cast<size_t>(tokens * kTopK));
  DeviceBuffer<int32_t> counts(kNumExperts), offsets(kNumExperts + 1), dest(static_cast<size_t>(tokens * kTopK)),
      scratch(static_cast<size_t>(permute_plan_scratch(tokens * kTopK, kNumExperts)));
  DeviceBuffer<bf16_bits> xp(static_cast<size_t>(tokens * kTopK * kLatent));
  DeviceBuffer<bf16_bits> y(static_cast<size_t>(tokens * kLatent));
  const GemmShape router_shape{tokens, kNumExperts, kHidden, Trans::none, Trans::transpose, OutType::fp32};
  const int64_t vocab_rows = 1024;
  const int64_t vocab = 163840;
  DeviceBuffer<bf16_bits> vlogits(static_cast<size_t>(vocab_rows * vocab));
  fill_uniform(vlogits.data(), static_cast<int64_t>(vlogits.size()), 33, -4.0f, 4.0f, cx.stream);
  DeviceBuffer<bf16_bits> dlogits(vlogits.size());
  DeviceBuffer<int32_t> targets(static_cast<size_t>(vocab_rows));
  MOESIM_CUDA_CHECK(cudaMemsetAsync(targets.data(), 0, targets.bytes(), cx.stream));
  DeviceBuffer<float> loss(static_cast<size_t>(vocab_rows));
  const int64_t nparam = 256 << 20;
  DeviceBuffer<float> master(static_cast<size_t>(nparam)), grad(static_cast<size_t>(nparam)), m(static_cast<size_t>(nparam)),
      v(static_cast<size_t>(nparam));
  DeviceBuffer<bf16_bits> param(static_cast<size_t>(nparam));
  for (auto* b : {&master, &grad, &m, &v}) MOESIM_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), cx.stream));
  // The router GEMM first so that the selection below runs on real logits.
  gemm.run(router_shape, x.data(), wr.data(), logits.data(), 1.0f, 0.0f, cx.stream);
  router_topk(logits.data(), bias.data(), tokens, kNumExperts, kTopK, RouterScore::sigmoid, true, idx.data(), wts.data(),
              cx.stream);
  permute_plan(idx.data(), tokens * kTopK, kNumExperts, counts.data(), offsets.data(), dest.data(), scratch.data(),
               cx.stream);
  struct Case {
    std::string name;
    double bytes;
    double flops;
    std::function<void()> run;
  };
  const double a = static_cast<double>(tokens * kTopK);
  std::vector<Case> cases = {
      {"router gemm 4096 x 896 x 7168 (fp32 out)", 2.0 * (tokens + kNumExperts) * kHidden + 4.0 * tokens * kNumExperts,
       router_shape.flops(), [&] { gemm.run(router_shape, x.data(), wr.data(), logits.data(), 1.0f, 0.0f, cx.stream); }},
      {"router top-16 of 896 (4096 tokens)", 4.0 * tokens * kNumExperts, 0,
       [&] {
         router_topk(logits.data(), bias.data(), tokens, kNumExperts, kTopK, RouterScore::sigmoid, true, idx.data(),
                     wts.data(), cx.stream);
       }},
      {"permute plan (65536 assignments, 896 experts)", 4.0 * a * 3, 0,
       [&] {
         permute_plan(idx.data(), tokens * kTopK, kNumExperts, counts.data(), offsets.data(), dest.data(), scratch.data(),
                      cx.stream);
       }},
      {"permute rows (65536 x 3584)", 2.0 * 2 * a * kLatent, 0,
       [&] { permute_rows(x.data(), dest.data(), tokens * kTopK, kTopK, kLatent, xp.data(), cx.stream); }},
      {"unpermute + combine (4096 x 16 x 3584)", 2.0 * (a + tokens) * kLatent, 0,
       [&] { unpermute_combine(xp.data(), dest.data(), wts.data(), tokens, kTopK, kLatent, y.data(), cx.stream); }},
      {"cross-entropy fwd+bwd (1024 x 163840)", 2.0 * 2 * vocab_rows * vocab, 0,
       [&] { cross_entropy(vlogits.data(), targets.data(), vocab_rows, vocab, 1.0f / vocab_rows, loss.data(), dlogits.data(), cx.stream); }},
      {"adamw (256 Mi params)", (4.0 * 4 + 4 * 3 + 2) * nparam, 0,
       [&] { adamw_step(master.data(), grad.data(), m.data(), v.data(), param.data(), nparam, AdamWConfig{}, cx.stream); }},
  };
  check_planned(cases.size(), kOtherKernelCases, "the other-kernels benchmark");
  cx.summary += "\nOther kernels (K3 shapes)                          time (us)   GB/s   TF/s\n";
  for (auto& c : cases) {
    const Timing t = time_on_stream(cx.stream, cx.s.warmup, cx.s.repeats, [&](int) { c.run(); });
    samples.push_back({{"kernel", c.name}, {"bytes", c.bytes}, {"flops", c.flops}, {"seconds", t.median_s},
                       {"bytes_per_s", c.bytes / t.median_s}, {"flops_per_s", c.flops / t.median_s}});
    cx.summary += "  " + c.name + fmt(": %.1f us, %.1f GB/s, %.1f TF/s\n", t.median_s * 1e6, c.bytes / t.median_s / 1e9,
                      c.flops / t.median_s / 1e12);
    cx.measured();
  }
  return samples;
}

json bench_host_copy(Context& cx) {
  const std::vector<double> sizes = host_copy_sizes(cx.opt.quick);
  const auto max_bytes = static_cast<size_t>(sizes.back());
  DeviceBuffer<uint8_t> dev(max_bytes);
  PinnedBuffer<uint8_t> host(max_bytes);
  MOESIM_CUDA_CHECK(cudaMemset(dev.data(), 0x5a, max_bytes));
  std::fill(host.data(), host.data() + max_bytes, uint8_t{0xa5});
  std::map<double, std::vector<double>> h2d, d2h;
  cx.summary += "\nPinned host copies      bytes     H2D GB/s   D2H GB/s\n";
  for (double bytes : sizes) {
    const auto b = static_cast<size_t>(bytes);
    const Timing in = time_on_stream(cx.stream, cx.s.warmup, cx.s.repeats, [&](int) { swap_in(host.data(), dev.data(), b, cx.stream); });
    const Timing out = time_on_stream(cx.stream, cx.s.warmup, cx.s.repeats, [&](int) { swap_out(dev.data(), host.data(), b, cx.stream); });
    h2d[bytes].push_back(bytes / in.median_s);
    d2h[bytes].push_back(bytes / out.median_s);
    cx.summary += fmt("               %10.3g   %9.1f  %9.1f\n", bytes, bytes / in.median_s / 1e9, bytes / out.median_s / 1e9);
    cx.measured();
  }
  return {{"h2d", calibration_table("bytes", "bytes_per_s", h2d)}, {"d2h", calibration_table("bytes", "bytes_per_s", d2h)}};
}

// Device memory in use on `device` (cudaMemGetInfo), after creating its context if needed.
double used_bytes(int device) {
  MOESIM_CUDA_CHECK(cudaSetDevice(device));
  MOESIM_CUDA_CHECK(cudaFree(nullptr));
  size_t free_b = 0, total_b = 0;
  MOESIM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<double>(total_b - free_b);
}

// The kinds calibration measures, in the file's order.
constexpr std::array<OpKind, 4> kCollectiveKinds = {OpKind::all_reduce, OpKind::all_gather, OpKind::reduce_scatter,
                                                    OpKind::all_to_all};

// Groups of the first 2, 4, 8, ... GPUs, and all of them (--devices 6: 2, 4, 6); none below 2.
std::vector<int> collective_group_sizes(int num_gpus) {
  std::vector<int> sizes;
  for (int n = 2; n <= num_gpus; n *= 2) sizes.push_back(n);
  if (num_gpus > 2 && sizes.back() != num_gpus) sizes.push_back(num_gpus);
  return sizes;
}

std::vector<double> collective_sizes(bool quick) {
  return quick ? std::vector<double>{1 << 20, 256 << 20}
               : std::vector<double>{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30};
}

// One rank's part of a collective: its communicator, stream and BF16 buffers.
struct RankCall {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  const bf16_bits* send = nullptr;
  bf16_bits* recv = nullptr;
};

// Issues `kind` over a group of n ranks, each contributing `per_rank` BF16 elements (nccl-tests'
// layout: all-reduce of n x per_rank elements; all-gather and reduce-scatter of per_rank per rank;
// all-to-all as grouped sends and receives of per_rank to and from every peer), for every rank in
// `ranks` inside one NCCL group: all of a group's ranks when one thread drives every GPU, or this
// process's one rank.
void issue_collective(OpKind kind, std::span<const RankCall> ranks, int64_t n, size_t per_rank) {
  const size_t all = per_rank * static_cast<size_t>(n);
  MOESIM_NCCL_CHECK(ncclGroupStart());
  for (const RankCall& r : ranks) {
    switch (kind) {
      case OpKind::all_reduce:
        MOESIM_NCCL_CHECK(ncclAllReduce(r.send, r.recv, all, ncclBfloat16, ncclSum, r.comm, r.stream));
        break;
      case OpKind::all_gather:
        MOESIM_NCCL_CHECK(ncclAllGather(r.send, r.recv, per_rank, ncclBfloat16, r.comm, r.stream));
        break;
      case OpKind::reduce_scatter:
        MOESIM_NCCL_CHECK(ncclReduceScatter(r.send, r.recv, per_rank, ncclBfloat16, ncclSum, r.comm, r.stream));
        break;
      case OpKind::all_to_all:
        for (int64_t peer = 0; peer < n; ++peer) {
          const size_t at = static_cast<size_t>(peer) * per_rank;
          MOESIM_NCCL_CHECK(ncclSend(r.send + at, per_rank, ncclBfloat16, static_cast<int>(peer), r.comm, r.stream));
          MOESIM_NCCL_CHECK(ncclRecv(r.recv + at, per_rank, ncclBfloat16, static_cast<int>(peer), r.comm, r.stream));
        }
        break;
      default: throw BackendError("issue_collective: not a calibrated collective");
    }
  }
  MOESIM_NCCL_CHECK(ncclGroupEnd());
}

// The measurements of one kind over one group: the file's table (busbw by size) and its samples.
struct CollectiveSeries {
  std::map<double, std::vector<double>> by_x;
  json samples = json::array();

  void add(const CollectiveRow& r) {
    by_x[r.size_bytes].push_back(r.busbw_bytes_per_s);
    samples.push_back({{"bytes", r.size_bytes}, {"count", r.count}, {"type", r.type.name}, {"redop", r.redop},
                       {"seconds", r.time_s}, {"algbw", r.algbw_bytes_per_s}, {"busbw", r.busbw_bytes_per_s}});
  }
  json to_json() const {
    json tb = calibration_table("bytes", "busbw_bytes_per_s", by_x);
    tb["samples"] = samples;
    return tb;
  }
};

// Collectives over the first n GPUs for each n in 2, 4, 8, ... up to the GPUs present, one host
// thread driving them all (timer.hpp: a repeat's time is the slowest rank's). Each kind runs on a
// communicator of its own, and for the first group size `communicator_bytes[kind]` gets what that
// communicator holds once it has run the kind at every size: the growth of device memory over the
// communicator's life, the largest over the GPUs.
json bench_collectives(Context& cx, int num_gpus, std::map<std::string, double>& communicator_bytes) {
  json out = json::object();
  if (num_gpus < 2) return out;
  const std::vector<double> sizes = collective_sizes(cx.opt.quick);
  cx.summary += "\nNCCL collectives (nccl-tests' size, count, algbw, busbw; median of the repeats)\n" +
                collective_table_header(false);
  for (int n : collective_group_sizes(num_gpus)) {
    std::vector<int> devices(static_cast<size_t>(n));
    std::iota(devices.begin(), devices.end(), 0);
    const auto max_bytes = static_cast<size_t>(sizes.back());
    std::vector<DeviceBuffer<bf16_bits>> send, recv;
    for (int r = 0; r < n; ++r) {
      MOESIM_CUDA_CHECK(cudaSetDevice(r));
      send.emplace_back(max_bytes / 2);
      recv.emplace_back(max_bytes / 2);
      fill_uniform(send.back().data(), static_cast<int64_t>(max_bytes / 2), 40 + static_cast<uint64_t>(r), -1.0f, 1.0f, nullptr);
      MOESIM_CUDA_CHECK(cudaDeviceSynchronize());
    }
    for (const OpKind kind : kCollectiveKinds) {
      const std::string name(enum_name(kind));
      std::vector<double> before;
      for (int r = 0; r < n; ++r) before.push_back(used_bytes(r));
      NcclGroup group(devices);
      std::vector<RankCall> calls;
      std::vector<DeviceStream> streams;
      for (int r = 0; r < n; ++r) {
        calls.push_back({group.comm(r), group.stream(r), send[static_cast<size_t>(r)].data(), recv[static_cast<size_t>(r)].data()});
        streams.push_back({group.device(r), group.stream(r)});
      }
      CollectiveSeries series;
      for (double bytes : sizes) {
        const int64_t per_rank = collective_elements_per_rank(bytes, n);
        const Timing t = summarize(time_repeats(streams, cx.s.warmup, cx.s.repeats, [&](int) {
          issue_collective(kind, calls, n, static_cast<size_t>(per_rank));
        }));
        const CollectiveRow row = collective_row(kind, n, per_rank, t.median_s);
        series.add(row);
        cx.summary += collective_table_line(row);
      }
      out[name][std::to_string(n)] = series.to_json();
      cx.log("collectives: " + name + " over " + std::to_string(n) + " GPUs done");
      cx.measured();
      if (n == 2) {
        group.synchronize();
        double grown = 0;
        for (int r = 0; r < n; ++r) grown = std::max(grown, used_bytes(r) - before[static_cast<size_t>(r)]);
        communicator_bytes[name] = std::max(0.0, grown);
      }
    }
  }
  MOESIM_CUDA_CHECK(cudaSetDevice(0));
  return out;
}

// Collectives with one rank per process (`mpirun -np N moesim calibrate`): each process drives its
// own GPU and joins, by ncclCommInitRank with ids process 0 made, the groups of
// collective_layouts (rank_bootstrap.hpp): within a node, and across nodes when the job spans
// several. Sizes, kinds, the issue and the table as bench_collectives; every member times its own
// calls (timer.hpp, with a barrier after the warm-ups so that every group starts its repeats
// together), and process 0 takes the slowest member's time of each repeat (over every group of the
// layout: the nodes' groups run at once), then the median. Tables within a node go to `intra`
// (the "collectives" of the file), tables across nodes to `inter` ("collectives_inter_node", with
// the nodes and ranks per node they span).
void bench_collectives_across_processes(Context& cx, Distributed& job, const ProcessPlacement& place, int device,
                                        json& intra, json& inter, std::map<std::string, double>& communicator_bytes) {
  const std::vector<double> sizes = collective_sizes(cx.opt.quick);
  const auto max_bytes = static_cast<size_t>(sizes.back());
  DeviceBuffer<bf16_bits> send(max_bytes / 2), recv(max_bytes / 2);
  fill_uniform(send.data(), static_cast<int64_t>(max_bytes / 2), 40 + static_cast<uint64_t>(job.rank()), -1.0f, 1.0f, nullptr);
  cudaStream_t stream = nullptr;
  MOESIM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MOESIM_CUDA_CHECK(cudaDeviceSynchronize());
  const bool root = job.rank() == 0;
  if (root) {
    cx.summary += "\nNCCL collectives, one process per GPU (nccl-tests' size, count, algbw, busbw; median of the repeats)\n" +
                  collective_table_header(true);
  }
  for (const CollectiveLayout& layout : collective_layouts(place)) {
    int group = -1, index = -1;  // this process's group in the layout and its rank in it
    for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
      const auto& members = layout.groups[gi];
      const auto at = std::find(members.begin(), members.end(), job.rank());
      if (at != members.end()) {
        group = static_cast<int>(gi);
        index = static_cast<int>(at - members.begin());
      }
    }
    const int n = layout.n;
    const std::string tier = layout.inter_node ? "inter_node" : "intra_node";
    for (const OpKind kind : kCollectiveKinds) {
      const std::string name(enum_name(kind));
      const std::vector<std::string> ids = share_ids(job, layout.groups.size(), [] {
        ncclUniqueId id;
        MOESIM_NCCL_CHECK(ncclGetUniqueId(&id));
        return std::string(id.internal, sizeof id.internal);
      });
      const double before = used_bytes(device);
      ncclComm_t comm = nullptr;
      if (group >= 0) {
        ncclUniqueId id;
        std::copy(ids[static_cast<size_t>(group)].begin(), ids[static_cast<size_t>(group)].end(), id.internal);
        MOESIM_NCCL_CHECK(ncclCommInitRank(&comm, n, id, index));
      }
      const RankCall call{comm, stream, send.data(), recv.data()};
      const DeviceStream mine_stream{device, stream};
      CollectiveSeries series;
      for (double bytes : sizes) {
        const int64_t per_rank = collective_elements_per_rank(bytes, n);
        std::vector<double> mine;  // this member's time per repeat
        if (comm) {
          mine = time_repeats(
              std::span(&mine_stream, 1), cx.s.warmup, cx.s.repeats,
              [&](int) { issue_collective(kind, std::span(&call, 1), n, static_cast<size_t>(per_rank)); },
              [&] { job.barrier(); });
        } else {
          job.barrier();  // the members' barrier after their warm-ups
        }
        const std::vector<std::string> all =
            job.gather(std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(double)));
        if (!root) continue;
        std::vector<double> seconds(static_cast<size_t>(cx.s.repeats), 0.0);
        for (const std::string& b : all) {
          if (b.size() != seconds.size() * sizeof(double)) continue;  // not a member
          for (size_t i = 0; i < seconds.size(); ++i) {
            double v = 0;
            std::memcpy(&v, b.data() + i * sizeof(double), sizeof v);
            seconds[i] = std::max(seconds[i], v);
          }
        }
        const CollectiveRow row = collective_row(kind, n, per_rank, summarize(seconds).median_s);
        series.add(row);
        cx.summary += collective_table_line(row, tier);
      }
      if (comm) {
        MOESIM_CUDA_CHECK(cudaStreamSynchronize(stream));
      }
      // What the communicator holds once it has run the kind at every size (first group size
      // within a node, as bench_collectives): the largest growth over the members.
      const double grown = comm ? std::max(0.0, used_bytes(device) - before) : 0.0;
      if (comm) MOESIM_NCCL_CHECK(ncclCommDestroy(comm));
      const std::vector<std::string> growth = job.gather(std::to_string(grown));
      if (!root) continue;
      if (!layout.inter_node && n == 2) {
        double most = 0;
        for (const std::string& g : growth) most = std::max(most, std::stod(g));
        communicator_bytes[name] = most;
      }
      json tb = series.to_json();
      if (layout.inter_node) {
        tb["nodes"] = layout.nodes;
        tb["ranks_per_node"] = layout.ranks_per_node;
        inter[name][std::to_string(n)] = tb;
      } else {
        intra[name][std::to_string(n)] = tb;
      }
      cx.log("collectives: " + name + " over " + std::to_string(n) + " processes (" + tier + ") done");
      cx.measured();
    }
  }
  MOESIM_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The NVIDIA kernel driver's version line (Linux), or empty.
std::string kernel_driver() {
  std::FILE* f = std::fopen("/proc/driver/nvidia/version", "r");
  if (!f) return {};
  char line[512] = {};
  const bool ok = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  std::string s = ok ? line : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

CalibrationRun run_calibration(const CalibrateOptions& options, Distributed& job) {
  // One process drives the first N local GPUs, or (under mpirun) one GPU per process: then process
  // 0 runs the one-GPU benchmarks while the others wait, and every process joins the collectives.
  const bool per_process = job.started_by_launcher();
  const int visible = device_count();
  if (visible == 0) throw BackendError("calibrate: no CUDA device");
  const auto wants = [&](const char* part) { return options.only.empty() || options.only.contains(part); };
  int device = 0;
  ProcessPlacement place;
  if (per_process) {
    place = place_process(job);
    agree_on_input(job, [&] { device = device_of(place, visible, "mpirun"); });
    char bus_id[64] = {};
    MOESIM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
    check_distinct_devices(job, place, bus_id, "mpirun");
  }
  const int num_gpus = per_process ? job.size() : options.num_devices > 0 ? std::min(options.num_devices, visible) : visible;
  const bool speaker = job.rank() == 0;  // process 0 measures on one GPU and writes the file
  // The software stack's own memory first, before this run allocates anything: the context.
  const double runtime_bytes = used_bytes(device);
  const DeviceInfo dev = device_info(device);
  CalibrateOptions opt = options;
  if (!speaker) {  // process 0 speaks for the job
    opt.log = nullptr;
    opt.progress = nullptr;
  }
  Context cx{opt, options.quick ? Settings{2, 5} : Settings{5, 25}, nullptr, std::string()};
  const auto start = std::chrono::steady_clock::now();
  // The plan first: the step graphs whose ops are timed are built, and every measurement counted,
  // before the first one runs, so that the progress has its total from the start.
  std::vector<AttentionCase> attention_plan;
  std::vector<CceCase> cce_plan;
  std::vector<LinearShape> linear_plan;
  if (speaker) {
    const bool quick = options.quick;
    if (wants("gemm")) {
      linear_plan = linear_shapes(opt.attention_scenario, quick);
      cx.planned += static_cast<int64_t>(gemm_shapes(quick).size() + grouped_rows_per_expert(quick).size() * kGroupedNk.size()) +
                    linear_measurements(linear_plan);
    }
    if (wants("memory")) cx.planned += static_cast<int64_t>(memory_copy_sizes(quick).size()) + kMemoryKernelCases + kOtherKernelCases;
    if (wants("copies")) cx.planned += static_cast<int64_t>(host_copy_sizes(quick).size());
    if (wants("attention")) {
      attention_plan = attention_cases(opt.attention_scenario.empty() ? kAttentionScenario : opt.attention_scenario, quick);
      for (const AttentionCase& c : attention_plan) cx.planned += static_cast<int64_t>(c.ops.size());
    }
    if (wants("loss")) {
      cce_plan = cce_cases(cce_shapes(quick));
      for (const CceCase& c : cce_plan) cx.planned += static_cast<int64_t>(c.ops.size());
    }
    if (wants("collectives")) {
      const size_t groups = per_process ? collective_layouts(place).size() : collective_group_sizes(num_gpus).size();
      cx.planned += static_cast<int64_t>(groups * kCollectiveKinds.size());
    }
    if (opt.progress) opt.progress(0, cx.planned);
  }
  json kernels = json::object();
  json host;
  json other;
  json attention;
  if (speaker) {  // the one-GPU benchmarks
    MOESIM_CUDA_CHECK(cudaStreamCreateWithFlags(&cx.stream, cudaStreamNonBlocking));
    if (wants("gemm") || wants("memory") || wants("copies")) {
      Gemm gemm;
      // Pools of 2 GiB and 1 GiB (BF16 elements): far beyond the 60 MB L2.
      Pool pool(size_t{1} << 30, 1);
      Pool out_pool(size_t{1} << 29, 2);
      if (wants("gemm")) {
        kernels["gemm"] = bench_gemm(cx, gemm, pool, out_pool);
        kernels["gemm_shapes"] = bench_gemm_shapes(cx, gemm, pool, out_pool, linear_plan);
        kernels["grouped_gemm"] = bench_grouped_gemm(cx, gemm);
      }
      if (wants("memory")) {
        kernels["memory"] = bench_memory(cx, pool, out_pool);
        other = bench_other(cx, gemm);
      }
      if (wants("copies")) host = bench_host_copy(cx);
    }
    if (wants("attention")) {
      attention = bench_attention({cx.stream, cx.opt.quick, cx.opt.log, [&] { cx.measured(); }}, attention_plan, cx.summary);
    }
    if (wants("loss")) kernels["cce"] = bench_cce({cx.stream, cx.opt.quick, cx.opt.log, [&] { cx.measured(); }}, cce_plan, cx.summary);
    MOESIM_CUDA_CHECK(cudaStreamSynchronize(cx.stream));
    MOESIM_CUDA_CHECK(cudaStreamDestroy(cx.stream));
  }
  std::map<std::string, double> communicator_bytes;
  json collectives;  // null: not measured (--only), absent from the file
  json collectives_inter_node = json::object();
  if (wants("collectives")) {
    if (per_process) {
      job.barrier();  // process 0's one-GPU benchmarks are done: every GPU is idle
      collectives = json::object();
      bench_collectives_across_processes(cx, job, place, device, collectives, collectives_inter_node, communicator_bytes);
    } else {
      collectives = bench_collectives(cx, num_gpus, communicator_bytes);
    }
  }
  if (!speaker) return CalibrationRun{};
  const json memory_overhead = {{"runtime_bytes", runtime_bytes},
                                {"communicator_bytes", communicator_bytes.empty() ? json::object() : json(communicator_bytes)}};
  if (!communicator_bytes.empty()) {
    cx.summary += fmt("\nSoftware stack memory: CUDA context %.3f GB; an NCCL communicator (2 GPUs) after running only", runtime_bytes / 1e9);
    for (const auto& [kind, bytes] : communicator_bytes) cx.summary += " " + kind + fmt(" %.3f GB,", bytes / 1e9);
    cx.summary.back() = '\n';
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json root = {
      {"format", "moesim-calibration"},
      // 7: kernels/gemm_shapes; 4: collectives across nodes; 3 otherwise.
      {"version", kernels.contains("gemm_shapes") ? 7 : collectives_inter_node.empty() ? 3 : 4},
      {"provenance",
       {{"gpu", dev.name}, {"num_gpus", num_gpus}, {"processes", job.size()}, {"nodes", place.num_nodes}, {"sms", dev.num_sms}, {"memory_bytes", dev.memory_bytes},
        {"l2_bytes", dev.l2_bytes}, {"driver", dev.driver}, {"kernel_driver", kernel_driver()}, {"cuda_runtime", dev.runtime}, {"cublas", dev.cublas},
        {"nccl", dev.nccl}, {"date", utc_now()}, {"command", options.command}, {"quick", options.quick},
        {"warmup", cx.s.warmup}, {"repeats", cx.s.repeats}, {"gemm_duty", options.gemm_duty}, {"wall_s", wall},
        {"only", std::vector<std::string>(options.only.begin(), options.only.end())}}},
  };
  // A part left out by --only is absent: the cost model keeps the hardware file's curves for it.
  if (!kernels.empty()) root["kernels"] = kernels;
  if (!other.is_null()) root["other_kernels"] = other;
  if (!host.is_null()) root["host_copy"] = host;
  if (!collectives.is_null()) root["collectives"] = collectives;
  if (!attention.is_null()) root["attention"] = attention;
  // With one GPU there is no communicator to measure: communicator_bytes stays empty (the step
  // graph then assumes the default per communicator), the context is still measured.
  root["memory_overhead"] = memory_overhead;
  // Version 4: groups across nodes, apart from those within one (a job on several nodes).
  if (!collectives_inter_node.empty()) root["collectives_inter_node"] = collectives_inter_node;
  CalibrationRun run;
  run.json = root.dump(1) + "\n";
  run.summary = "Calibration on " + std::to_string(num_gpus) + " x " + dev.name + " (driver " + dev.driver + ", CUDA " +
                dev.runtime + ", cuBLASLt " + dev.cublas + ", NCCL " + dev.nccl + ")\n\n" + cx.summary +
                fmt("\n(%.0f s)\n", wall);
  return run;
}

}  // namespace moesim::cuda
