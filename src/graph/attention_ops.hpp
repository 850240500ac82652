// SPDX-License-Identifier: MIT
// The attention blocks of a layer tape, one per kind: GQA/MHA, MLA, MLA + DeepSeek Sparse
// Attention, and Kimi Delta Attention, with their context-parallel exchanges. Internal to src/graph.
#pragma once

#include "graph/tape_builder.hpp"

namespace moesim {

// Each takes the normalised (TP-gathered) input x and returns the output projection's result,
// before the TP region is left.
int gqa_block(TapeBuilder& b, int x);
int mla_block(TapeBuilder& b, int x);
int mla_dsa_block(TapeBuilder& b, int x);
int kda_block(TapeBuilder& b, int x);

}  // namespace moesim
