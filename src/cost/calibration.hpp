// SPDX-License-Identifier: MIT
// Calibration: measured kernel throughput, copy bandwidth and collective bus bandwidth, read from
// a calibration file (docs/calibration/format.md, written by `moesim calibrate`) that a hardware
// file names. The cost model uses a table instead of its efficiency curve for what the table covers.
//
// A table holds points (x_i, y_i) with x strictly increasing; between points y is linear in log x
// (shapes and sizes are measured on geometric grids), so it is exact at grid points and monotone
// between them; outside the grid it is clamped to the end value.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/json_input.hpp"
#include "graph/op.hpp"

namespace moesim {

// The passes of the cut cross-entropy loss (OpKind::cce_loss) as the executor runs them, vocabulary
// chunk by chunk (src/backend/cuda/op_kernels.cpp, cce()): each has a table of its own.
//   forward          the fwd and recompute ops (one launch): per chunk the logits GEMM, written to
//                    HBM, and the log-sum-exp kernel that reads them back
//   backward         the bwd op of a head that trains: per chunk the softmax gradient (dlogits,
//                    written to HBM) and the dh and dW GEMMs that read it
//   backward_frozen  the bwd op of a frozen head (LoRA without an lm_head adapter): dh only
enum class CcePass : uint8_t { forward, backward, backward_frozen };
// The pass of a cce_loss op: its phase, and for bwd whether its weight trains.
CcePass cce_pass_of(const Op& op);

template <>
struct EnumNames<CcePass> {
  static constexpr std::array<std::pair<std::string_view, CcePass>, 3> names{{
      {"forward", CcePass::forward},
      {"backward", CcePass::backward},
      {"backward_frozen", CcePass::backward_frozen},
  }};
};

// The GEMMs of a dense linear layer of forward shape (m, n, k) as the executor runs them
// (src/backend/cuda/op_kernels.cpp, gemm()): the forward y = x W^T (m x n x k), and in the backward
// the input gradient dx = dy W (m x k x n) and, when the weight trains, the weight gradient
// dW = dy^T x (n x k x m).
enum class GemmPass : uint8_t { forward, input_grad, weight_grad };

template <>
struct EnumNames<GemmPass> {
  static constexpr std::array<std::pair<std::string_view, GemmPass>, 3> names{{
      {"forward", GemmPass::forward},
      {"input_grad", GemmPass::input_grad},
      {"weight_grad", GemmPass::weight_grad},
  }};
};

class CalibrationTable {
 public:
  CalibrationTable() = default;
  // Points sorted by x, x > 0 strictly increasing, y > 0 (checked by the reader).
  explicit CalibrationTable(std::vector<std::pair<double, double>> points) : points_(std::move(points)) {}

  double at(double x) const;
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
};

struct Calibration {
  std::string file;
  std::optional<CalibrationTable> gemm_flops_per_s;          // BF16 GEMMs, by min(m, n, k)
  std::optional<CalibrationTable> grouped_gemm_flops_per_s;  // BF16 grouped GEMMs, by rows per group
  std::optional<CalibrationTable> memory_bytes_per_s;        // memory-bound kernels, by bytes moved (read + write)
  std::optional<CalibrationTable> h2d_bytes_per_s;           // pinned host -> device, by bytes
  std::optional<CalibrationTable> d2h_bytes_per_s;           // device -> pinned host, by bytes
  std::map<std::pair<OpKind, int64_t>, CalibrationTable> busbw;  // (collective, group size): busbw by nccl-tests size
  // Version 4: collectives over groups spanning several nodes (`mpirun` across nodes), apart from
  // those within one. Recorded and checked; the cost model does not read them yet (a group across
  // scale-up domains keeps the analytic model).
  struct InterNodeTable {
    int64_t nodes = 0;           // nodes the group spans
    int64_t ranks_per_node = 0;  // its ranks on each
    CalibrationTable busbw;
  };
  std::map<std::pair<OpKind, int64_t>, InterNodeTable> busbw_inter_node;  // (collective, group size)
  // Version 2: attention kernels (flash_attention, sparse_attention, dsa_indexer, indexer_score,
  // kda), FLOP/s of the op's own `flops` by query rows (op.m), per (kind, backward?): forward
  // covers the fwd and recompute phases, backward the bwd phase.
  std::map<std::pair<OpKind, bool>, CalibrationTable> attention;
  // kernels/cce: the CCE loss measured whole through the executor's launches, FLOP/s of the op's
  // own flops by its hidden size (op.k), per pass. The rate rises with the hidden size (each
  // logit's HBM round trip is a fixed cost, its GEMM work 2 x hidden) and hardly depends on the
  // vocabulary or TP degree, so one table serves models of any of them (chunks of one width).
  std::map<CcePass, CalibrationTable> cce;
  // Version 5, kernels/memory_by_kind: memory-bound kernels per op kind and pass, bytes/s by bytes
  // moved, per (kind, backward?) as the attention tables. A fit to a profiler trace writes them: at
  // equal size a norm, an activation's backward, a permute and the loss run at bandwidths up to 3x
  // apart, so one table by bytes alone gives an op the rate of another kind that happened to move
  // as many bytes in the trace. An op of a kind with a table reads it instead of kernels/memory.
  // Version 6 adds tables of one row width ("norm:128", key width > 0; width 0: the kind's table
  // of every width), read first: a norm over 128-element heads (QK-norm) moves bytes at a third
  // of the rate of a norm over 2,048-element rows, and at twice the tokens a layer norm moves as
  // many bytes as the per-head norm did. Keyed (kind, width, backward?).
  std::map<std::tuple<OpKind, int64_t, bool>, CalibrationTable> memory_by_kind;
  // Version 7, kernels/gemm_shapes: BF16 GEMMs of the linear layers of given (n, k), each pass
  // measured in its own layout, FLOP/s (2 m n k) by the layer's tokens m; keyed (pass, n, k). The
  // one-measure table kernels/gemm stands for every shape of one min(m, n, k) and every layout, and
  // misprices a model's own shapes by up to 15% (docs/calibration/format.md).
  std::map<std::tuple<GemmPass, int64_t, int64_t>, CalibrationTable> gemm_shapes;

  // The bus-bandwidth table of a collective over n ranks in one scale-up domain, or null.
  const CalibrationTable* collective(OpKind kind, int64_t n) const;
  // The attention table of an op kind in a phase (bwd: backward; fwd, recompute: forward), or null.
  const CalibrationTable* attention_table(OpKind kind, Phase phase) const;
  // The table of the GEMM of a linear layer of forward (n, k) in `pass`, or null.
  const CalibrationTable* gemm_shape_table(GemmPass pass, int64_t n, int64_t k) const;
  // The CCE table of a cce_loss op's pass, or null (the op then stays on the GEMM table or curve).
  const CalibrationTable* cce_table(const Op& op) const;
  // The memory-bound table of an op's kind, row width (memory_table_width) and phase (bwd:
  // backward; the others: forward): its width's, else its kind's, or null.
  const CalibrationTable* memory_table(const Op& op) const;
};

// The op kinds an attention table may name (format version 2).
bool is_calibrated_attention_kind(OpKind kind);
// The op kinds a kernels/memory_by_kind table may name (format version 5): the memory-bound
// kernels (no GEMM, attention or KDA curve), not copies to the host or communication.
bool is_memory_bound_kind(OpKind kind);
// The row width a memory-bound op's table is kept by: a norm's normalised width (op.k), 0 for
// every other op.
int64_t memory_table_width(const Op& op);
// Whether that kind's table holds bytes/s (of the op's bytes read and written) rather than FLOP/s:
// the DSA key gather of the unfused form, a memory-bound kernel.
bool attention_table_counts_bytes(OpKind kind);

// Reads and checks a calibration file; bad input throws InputError naming the file and JSON path.
Calibration load_calibration(const InputText& input);
// The same for a file already parsed (`root`; `input` names it in errors).
Calibration load_calibration(const InputText& input, const nlohmann::json& root);

}  // namespace moesim
