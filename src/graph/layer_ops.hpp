// SPDX-License-Identifier: MIT
// The forward of each layer kind as a LayerTape: attention (KDA, MLA, MLA+DSA, GQA/MHA), dense FFN
// and MoE, with tensor, context and expert parallelism, LoRA adapters and fused-op switches.
// Shapes and FLOP formulas sit beside each op; model/accounting.hpp has the per-token totals these
// ops add up to.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tape.hpp"
#include "model/model_spec.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

struct LayerContext {
  const ModelSpec* model = nullptr;
  const ScenarioSpec* scenario = nullptr;
  int64_t tokens = 0;    // T: tokens of one micro-batch on this rank (micro_batch x sequence / cp)
  int64_t routed_tokens = 0;  // of T, those this rank routes (ParallelPlan::routed_tokens)
  int64_t seq_len = 0;   // the whole sequence: the keys of causal attention
  int64_t tp = 1;
  int64_t cp = 1;
  bool cp_query_heads = false;  // keys and values exchanged at the query heads (parallel.cp_kv_heads)
  Dtype cp_grad = Dtype::bf16;  // the format their gradients are exchanged in (parallel.cp_grad_format)
  int64_t ep = 1;
  int64_t etp = 1;                        // expert tensor parallelism (= tp unless folded)
  GroupKind expert_tp_group = GroupKind::tp;  // the group the routed experts' TP collectives use
  bool sequence_parallel = false;
  TpCommOverlap tp_comm_overlap = TpCommOverlap::none;  // none unless sequence parallel with tp > 1
  // Sequence parallel: the TP regions' all-gathers run again in the backward rather than their
  // outputs being kept (parallel.tp.sp_backward_input gather_again).
  bool sp_gather_again = false;
  int64_t experts_per_rank = 0;
  Dtype act = Dtype::bf16;      // activations
  Dtype compute = Dtype::bf16;  // matmul inputs of the linear layers
  Dtype attention = Dtype::bf16;    // attention kernels (attention_dtype)
  Dtype unquantized = Dtype::bf16;  // router and LM head (unquantized_dtype)
  bool train_base = true;       // base weights trainable (false under LoRA)
  std::vector<LoraTarget> lora_targets;
  int64_t lora_rank = 0;
  FusedOpsSpec fused;
  bool local_first = false;           // overlap.moe_local_first
  bool shared_expert_overlap = false;  // overlap.moe_shared_expert_overlap
  int64_t dispatch_chunks = 1;         // overlap.moe_dispatch_chunks
  double attention_dropout = 0;  // costs only in the materialised attention core
  double hidden_dropout = 0;     // the residual adds' dropout (residual_add, layer_ops.cpp)

  int64_t sp_tokens() const { return sequence_parallel && tp > 1 ? tokens / tp : tokens; }
  bool experts_folded() const { return etp != tp; }
  bool lora_on(LoraTarget t) const;
};

// The forward of transformer layer `layer` (1-based). Input and output: the residual stream.
LayerTape build_layer_tape(const LayerContext& c, int64_t layer);
// Token ids -> the residual stream (first pipeline stage).
LayerTape build_embedding_tape(const LayerContext& c);
// The residual stream -> the normalised hidden state the loss reads, TP-gathered (last stage).
LayerTape build_final_norm_tape(const LayerContext& c);

}  // namespace moesim
