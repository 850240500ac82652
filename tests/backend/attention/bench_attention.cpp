// SPDX-License-Identifier: MIT
// attention_bench: times every attention kernel at K3 per-rank shapes (models/kimi-k3-dsa.json:
// 96 heads, KDA 128 x 128, MLA qk 192 / v 128, indexer 64 x 128, top-2048, latent 512 + rope 64)
// and prints a markdown table of achieved FLOP/s and bytes/s against the peaks given (defaults:
// H200 dense BF16 989 TFLOP/s and HBM 4.8 TB/s, from NVIDIA's H200 datasheet:
// docs/modelling.md#hardware-figures). `sdpa` times cuDNN's fused attention (sdpa.hpp) at MLA's
// head dims with --heads heads, and at 64 query heads of dim 128 as MHA and as GQA with 8
// key/value heads (Llama 3.1 70B's attention per GPU without tensor parallelism);
// bench/attention_reference.py times PyTorch's cuDNN SDPA at the same shapes.
//   attention_bench [--seq N] [--batch N] [--heads N] [--repeats N] [--only kda|mla|dsa|sdpa]
//                   [--peak-tflops X] [--peak-gbps X] [--out FILE]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/attention/attention_timing.hpp"

using namespace moesim::cuda;

int main(int argc, char** argv) {
  int64_t seq = 8192, batch = 1, heads = 96;
  double peak_tflops = 989, peak_gbps = 4800;
  TimingOptions opt;
  std::string only, out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seq") {
      seq = std::atoll(next());
    } else if (a == "--batch") {
      batch = std::atoll(next());
    } else if (a == "--heads") {
      heads = std::atoll(next());
    } else if (a == "--repeats") {
      opt.repeats = std::atoi(next());
    } else if (a == "--only") {
      only = next();
    } else if (a == "--peak-tflops") {
      peak_tflops = std::atof(next());
    } else if (a == "--peak-gbps") {
      peak_gbps = std::atof(next());
    } else if (a == "--out") {
      out_path = next();
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::vector<KernelTiming> all;
  auto run = [&](const char* name, auto&& fn) {
    if (!only.empty() && only != name) return;
    try {
      for (auto& t : fn()) {
        std::fprintf(stderr, "%-22s %10.3f ms\n", t.name.c_str(), t.ms);
        all.push_back(std::move(t));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", name, e.what());
    }
  };
  run("kda", [&] { return time_kda(KdaShape{.batch = batch, .seq = seq, .heads = heads}, opt); });
  run("mla", [&] { return time_mla(MlaShape{.batch = batch, .seq = seq, .heads = heads}, opt); });
  run("sdpa", [&] {
    std::vector<KernelTiming> t = time_sdpa(SdpaShape{batch, seq, heads, heads, 192, 128}, "sdpa_mla", opt);
    for (auto& x : time_sdpa(SdpaShape{batch, seq, 64, 64, 128, 128}, "sdpa_mha", opt)) t.push_back(std::move(x));
    for (auto& x : time_sdpa(SdpaShape{batch, seq, 64, 8, 128, 128}, "sdpa_gqa", opt)) t.push_back(std::move(x));
    return t;
  });
  run("dsa", [&] {
    return time_dsa(DsaIndexerShape{.batch = batch, .seq = seq, .heads = 64, .head_dim = 128, .top_k = 2048},
                    DsaAttentionShape{.batch = batch, .seq = seq, .heads = heads, .top_k = 2048}, opt);
  });
  std::string table = "| kernel | shape | median ms | model TFLOP | TFLOP/s | % of " +
                      std::to_string(static_cast<int>(peak_tflops)) + " TF | min GB | GB/s | % of " +
                      std::to_string(static_cast<int>(peak_gbps)) + " GB/s |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& t : all) {
    const double s = t.ms * 1e-3;
    const double tf = t.cost.flops / s / 1e12, gbs = t.cost.bytes / s / 1e9;
    char row[512];
    std::snprintf(row, sizeof row, "| %s | %s | %.3f | %.3f | %.1f | %.2f%% | %.3f | %.0f | %.2f%% |\n", t.name.c_str(),
                  t.shape.c_str(), t.ms, t.cost.flops / 1e12, tf, 100 * tf / peak_tflops, t.cost.bytes / 1e9, gbs,
                  100 * gbs / peak_gbps);
    table += row;
  }
  std::fputs(table.c_str(), stdout);
  if (!out_path.empty()) {
    if (FILE* f = std::fopen(out_path.c_str(), "w")) {
      std::fputs(table.c_str(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
      return 1;
    }
  }
  return all.empty() ? 1 : 0;
}
