// SPDX-License-Identifier: MIT
// The LM head and loss of the last pipeline stage, in three forms:
//   full     logits (T x V/tp) materialised in forward and kept for backward: fused, FP32 logits
//            the head writes and one kernel each way; eager, PyTorch's cross-entropy on an FP32
//            copy of BF16 logits (loss.implementation);
//   chunked  the sequence split in chunks; each chunk's logits exist only while its loss is
//            computed, and are recomputed chunk by chunk in backward;
//   cce      cut cross-entropy: logits computed blockwise on chip, never written; the backward
//            recomputes them blockwise.
// Forward and backward are emitted separately because the schedule puts other work between them
// only when the last stage is not also the first (it never does in 1F1B: they are adjacent).
#pragma once

#include "graph/layer_ops.hpp"
#include "graph/program.hpp"

namespace moesim {

struct LossState {
  uint32_t x_buffer = 0;     // the normalised hidden state (T x d), kept for backward
  uint32_t x_producer = 0;
  std::vector<uint32_t> saved;  // buffers kept from forward to backward (logits, lse)
  uint32_t last_forward_op = 0;
};

LossState emit_loss_forward(ProgramWriter& w, const LayerContext& c, const TapePolicy& policy, int32_t micro,
                            uint32_t x_buffer, uint32_t x_producer);
// Returns the gradient of x: (buffer, producer).
std::pair<uint32_t, uint32_t> emit_loss_backward(ProgramWriter& w, const LayerContext& c, const TapePolicy& policy,
                                                 int32_t micro, const LossState& state);

}  // namespace moesim
