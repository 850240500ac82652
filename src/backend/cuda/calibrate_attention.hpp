// SPDX-License-Identifier: MIT
// Calibration of the attention kernels (`moesim calibrate --only attention`): the attention ops of
// a step graph launched through the executor's own launches (op_kernels.hpp, what `moesim run` and
// `validate` issue), so that each measurement is divided by the very `flops` (or, for the key
// gather, bytes) the simulator charges for that op; written as the file's `attention` tables by
// kind and phase, by query rows (docs/calibration/format.md).
//
// The graph is a scenario (kAttentionScenario: the 1-GPU K3 slice, K3's per-rank attention heads
// at TP 1 - MLA 96 heads, DSA indexer 64 x 128 top-2048 in BF16, KDA 96 x 128 chunk 64, or the
// one `calibrate --scenario` names) as full fine-tuning (under LoRA the DSA indexer is frozen and
// has no backward op to time) with one micro-batch of one sequence of each grid length. The grid
// leaves out 8,192, the calibration scenarios' own length, so that `validate` checks the tables on
// a held-out shape. Forward kernels are timed on the fwd op (the recompute op is the same launch),
// backward kernels on the bwd op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/cuda/calibrate_launch.hpp"
#include "graph/step_graph.hpp"

namespace moesim::cuda {

inline constexpr const char* kAttentionScenario = "scenarios/calibration/k3-slice-1gpu.json";

// The sequence lengths timed (--quick: two of them).
std::vector<int64_t> attention_seq_grid(bool quick);

// One step graph whose attention ops are timed: the scenario at one grid length, fused or (for
// its DSA indexer's own kinds) unfused; `ops` are calibrated attention kinds, fwd or bwd, each
// (kind, phase) once per length.
struct AttentionCase : GraphOps {
  int64_t seq = 0;
  bool unfused_dsa = false;
};

// Builds the cases on the CPU (no GPU needed; tested): each grid length on `scenario` and, where
// it fuses DSA, on its unfused form too, whose indexer score and key gather are kinds of their
// own; a kind both forms run is timed once per length, in the fused form. Throws InputError
// naming --scenario when the scenario cannot be read.
std::vector<AttentionCase> attention_cases(const std::string& scenario, bool quick);

// Times every case's ops and returns the file's `attention` object {kind: {"forward": table,
// "backward": table}}; appends a table for the terminal to `summary`.
nlohmann::json bench_attention(const OpBenchOptions& options, const std::vector<AttentionCase>& cases,
                               std::string& summary);

}  // namespace moesim::cuda
