// SPDX-License-Identifier: MIT
// Calibration of the cut cross-entropy loss (`moesim calibrate --only loss`): the step graph's own
// cce_loss ops launched through the executor's launch_op (op_kernels.hpp) - the chunked loss that
// `moesim run` and `validate` issue - at a grid of hidden sizes, written as kernels/cce
// (docs/calibration/format.md): FLOP/s of each op's own `flops` by its hidden size, one table per
// pass (cost/calibration.hpp, CcePass).
//
// Why by hidden size: per vocabulary chunk the executor writes the [tokens, chunk] logits to HBM
// and reads them back (and in backward writes and reads dlogits), a fixed cost per logit, while
// the GEMM work per logit is 2 x hidden. So FLOP/s ~ 2h / (2h / R_gemm + c / B_hbm) is a function
// of the hidden size h (weakly of the rows, through R_gemm), whatever the vocabulary or TP degree.
//
// The cases are step graphs of one base scenario (kCceScenario: Qwen3's 151,936-entry vocabulary
// in 19 chunks of 8,000, 8,192 tokens per micro-batch) with the model's hidden size set to each
// grid value, built twice: as full fine-tuning (the head trains: its fwd, recompute and bwd ops
// are timed) and as LoRA without an lm_head adapter (a frozen head: its bwd op; its fwd and
// recompute are the same launches as the full fine-tuning's). The grid leaves out the hidden
// sizes of the validation scenarios (2048 Qwen3, 4096 Llama 8B, 7168 K3), so that `validate`
// tests the table between grid points, as the attention tables leave out 8,192 tokens.
// Caveat: the table is measured at the base scenario's 8,192 rows and chunk width; other row
// counts and chunk widths read it at their hidden size unchanged. How much the rows matter is
// measured beside it: two hidden sizes at 4,096 and 16,384 rows, samples with "in_table" false.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/cuda/calibrate_launch.hpp"
#include "graph/step_graph.hpp"

namespace moesim::cuda {

inline constexpr const char* kCceScenario = "scenarios/calibration/qwen3-moe-slice-1gpu.json";

// The grid of hidden sizes (--quick: two of its points).
std::vector<int64_t> cce_hidden_sizes(bool quick);

// One step graph to time: the base scenario at a hidden size and token count, its head trained
// or frozen; `in_table` false for the row probes, which are recorded but not in the table's points.
struct CceShape {
  int64_t hidden_size = 0;
  int64_t rows = 8192;
  bool head_trains = true;
  bool in_table = true;
};
// The grid at 8,192 rows both ways, then (not --quick) the row probes with the head trained.
std::vector<CceShape> cce_shapes(bool quick);

// One shape's step graph; `ops` are its cce_loss ops of one micro-batch: fwd, recompute and bwd,
// or with the head frozen, bwd.
struct CceCase : GraphOps {
  CceShape shape;
};

// Builds the cases on the CPU (no GPU needed; tested with dry launches).
std::vector<CceCase> cce_cases(const std::vector<CceShape>& shapes);

// Times every case's ops (cce_cases(cce_shapes(quick)): the caller plans them, and counts them for
// its progress) and returns the kernels/cce object {"forward": table, "backward": table,
// "backward_frozen": table}; appends a table for the terminal to `summary`.
nlohmann::json bench_cce(const OpBenchOptions& options, const std::vector<CceCase>& cases, std::string& summary);

}  // namespace moesim::cuda
