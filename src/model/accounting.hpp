// SPDX-License-Identifier: MIT
// Parameter, weight-byte and FLOP accounting of a model, from its architecture fields only.
//
// Conventions (those of the official figures):
// - Parameters include norms, biases, gates and convolutions; vision parameters are counted in
//   total_params but not in the text model's active parameters.
// - Active parameters per token exclude the input embedding table (and a learned position table),
//   and count top_k of the routed experts. A tied LM head counts as active once.
// - Forward FLOPs per token: 2 per multiply-accumulate of every matrix a token passes through
//   (active matmul parameters x 2; embedding lookups are free), plus the attention terms at
//   sequence length N, averaged over the N positions of a causal sequence:
//     dense MLA/GQA: heads * (d_qk + d_v) * (N + 1)    [2*heads*(d_qk+d_v) per (query, key) pair, N(N+1)/2 pairs]
//     KDA chunked core (Kimi Linear): heads * (6 dh^2 + 3 C dh + C^2), C = min(chunk, N); plus the short conv
//     DSA indexer: idx_heads * idx_dim * (N + 1); sparse attention: 2 * heads * (2*kv_lora + rope) * mean(min(top_k, t))
//   Norms, activations and softmax are elementwise and not counted.
// - A training step costs 3x the forward (backward = 2x forward) for every term.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/model_spec.hpp"

namespace moesim {

struct ComponentCount {
  std::string name;      // "moe.routed_experts", "attention.kda", ...
  int64_t params = 0;
  double active_params = 0;  // per token; fractional for routed experts only in principle
  Dtype dtype = Dtype::bf16;
};

struct ParamReport {
  std::vector<ComponentCount> components;  // in a fixed order; components with no parameters omitted
  int64_t total_params = 0;                // text + vision
  int64_t text_params = 0;
  int64_t vision_params = 0;
  double active_params = 0;                // text model, per token, excluding the input embedding
  double active_params_with_embedding = 0;
  std::map<Dtype, double> weight_bytes;    // by storage format
  double total_weight_bytes = 0;
};

struct FlopReport {
  int64_t seq_len = 0;
  double matmul_fwd = 0;                   // per token
  std::map<std::string, double> attention_fwd;  // per token, by term ("mla_dense", "kda_core", "dsa_indexer", ...)
  double fwd = 0;                          // per token: matmul + attention
  double train = 0;                        // per token: 3 x fwd
};

ParamReport count_params(const ModelSpec& model);
FlopReport count_flops(const ModelSpec& model, int64_t seq_len);

// Parameters of one layer (1-based), split as FSDP shards them: expert weights over the expert-data-
// parallel group, the rest over the whole shard group.
struct LayerParams {
  int64_t non_expert = 0;
  int64_t expert = 0;  // all routed experts of the layer
};
LayerParams layer_params(const ModelSpec& model, int64_t layer);

// Per-layer building blocks, shared with the graph builder.
int64_t attention_params(const ModelSpec& model, AttentionKind kind);  // excluding the indexer
int64_t dsa_indexer_params(const ModelSpec& model);
int64_t routed_expert_params(const ModelSpec& model);  // one expert
// Mean keys per query over a causal sequence of n tokens when a query reads at most `limit` keys:
// mean over t = 1..n of min(limit, t). limit = n gives (n + 1) / 2.
double mean_causal_keys(int64_t n, int64_t limit);
// Attention-core forward FLOPs per token at sequence length N for one layer of `kind`
// (excluding projections, which are matmul FLOPs).
std::map<std::string, double> attention_core_flops(const ModelSpec& model, AttentionKind kind, int64_t seq_len);

}  // namespace moesim
