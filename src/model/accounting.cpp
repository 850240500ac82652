// SPDX-License-Identifier: MIT
#include "model/accounting.hpp"

#include <algorithm>

namespace moesim {
namespace {

int64_t norm_params(const ModelSpec& m, int64_t width) { return m.norm == NormKind::layernorm ? 2 * width : width; }

// Matrices of one FFN of width f on input width w: gated units have gate, up and down.
int64_t ffn_matrix_params(const ModelSpec& m, int64_t w, int64_t f) { return (is_gated(m.activation) ? 3 : 2) * w * f; }
int64_t ffn_bias_params(const ModelSpec& m, int64_t w, int64_t f) {
  return m.biases.ffn ? (is_gated(m.activation) ? 2 : 1) * f + w : 0;
}

// Splits a block into matrix parameters (2 FLOPs per token each) and the rest.
struct Block {
  int64_t matrix = 0;
  int64_t other = 0;  // norms, biases, per-channel gates
  int64_t total() const { return matrix + other; }
};

Block gqa_block(const ModelSpec& m) {
  const auto& g = *m.gqa;
  const int64_t d = m.hidden_size;
  Block b;
  b.matrix = d * g.num_heads * g.head_dim + 2 * d * g.num_kv_heads * g.head_dim + g.num_heads * g.head_dim * d;
  if (m.biases.qkv) b.other += (g.num_heads + 2 * g.num_kv_heads) * g.head_dim;
  if (m.biases.attention_output) b.other += d;
  if (g.qk_norm) b.other += 2 * g.head_dim;
  return b;
}

Block mla_block(const ModelSpec& m) {
  const auto& a = *m.mla;
  const int64_t d = m.hidden_size;
  const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  Block b;
  if (a.q_lora_rank > 0) {
    b.matrix += d * a.q_lora_rank + a.q_lora_rank * a.num_heads * qk;  // q_a, q_b
    b.other += a.q_lora_rank;                                           // q_a norm
  } else {
    b.matrix += d * a.num_heads * qk;
  }
  b.matrix += d * (a.kv_lora_rank + a.qk_rope_head_dim);                            // kv_a (latent + shared rope key)
  b.other += a.kv_lora_rank;                                                        // kv_a norm
  b.matrix += a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim);  // kv_b
  b.matrix += a.num_heads * a.v_head_dim * d;                                       // o
  if (a.output_gate == OutputGate::full) b.matrix += d * a.num_heads * a.v_head_dim;
  if (m.biases.attention_output) b.other += d;
  return b;
}

Block dsa_indexer_block(const ModelSpec& m) {
  const auto& x = *m.dsa_indexer;
  const int64_t d = m.hidden_size;
  const int64_t q_in = (m.mla && m.mla->q_lora_rank > 0) ? m.mla->q_lora_rank : d;
  Block b;
  b.matrix = q_in * x.num_heads * x.head_dim  // q_idx from the query latent
             + d * x.head_dim                 // one shared key per token
             + d * x.num_heads;               // per-head weights
  b.other = 2 * x.head_dim;                   // LayerNorm on the key
  return b;
}

Block kda_block(const ModelSpec& m) {
  const auto& k = *m.kda;
  const int64_t d = m.hidden_size;
  const int64_t p = k.num_heads * k.head_dim;
  Block b;
  b.matrix = 3 * d * p + p * d;                             // q, k, v, o
  b.matrix += d * k.decay_gate_rank + k.decay_gate_rank * p;  // low-rank decay gate
  b.matrix += d * k.num_heads;                                // beta, one per head
  if (k.output_gate == OutputGate::full) b.matrix += d * p;
  if (k.output_gate == OutputGate::low_rank) b.matrix += d * k.output_gate_rank + k.output_gate_rank * p;
  b.other = 3 * p * k.short_conv_kernel  // depthwise convs on q, k, v
            + p                          // decay bias (dt_bias)
            + k.num_heads                // A_log
            + k.head_dim;                // gated output norm
  if (m.biases.qkv) b.other += 3 * p;
  if (m.biases.attention_output) b.other += d;
  return b;
}

Block attention_block(const ModelSpec& m, AttentionKind kind) {
  switch (kind) {
    case AttentionKind::mha:
    case AttentionKind::gqa: return gqa_block(m);
    case AttentionKind::mla:
    case AttentionKind::mla_dsa: return mla_block(m);
    case AttentionKind::kda: return kda_block(m);
  }
  return {};
}


int64_t vision_params(const VisionSpec& v) {
  const int64_t w = v.hidden_size;
  const int64_t patch = v.num_channels * v.patch_size * v.patch_size * w + w;
  const int64_t layer = (4 * w * w + 4 * w)                                // qkv + o with biases
                        + (2 * w * v.intermediate_size + v.intermediate_size + w)  // MLP with biases
                        + 4 * w;                                           // two LayerNorms
  return patch + v.num_layers * layer + 2 * w;  // + final LayerNorm; the projector is counted apart
}

int64_t vision_projector_params(const VisionSpec& v, int64_t d) {
  const int64_t merged = v.merge_size * v.merge_size * v.hidden_size;
  if (v.projector_hidden_size == 0) return merged * d + d;
  return 2 * merged + merged * v.projector_hidden_size + v.projector_hidden_size + v.projector_hidden_size * d + d;
}

}  // namespace

double mean_causal_keys(int64_t n, int64_t limit) {
  const double k = static_cast<double>(limit);
  const double nn = static_cast<double>(n);
  if (n <= limit) return (nn + 1) / 2;
  return (k * (k + 1) / 2 + (nn - k) * k) / nn;
}

int64_t attention_params(const ModelSpec& model, AttentionKind kind) { return attention_block(model, kind).total(); }
int64_t dsa_indexer_params(const ModelSpec& model) { return dsa_indexer_block(model).total(); }
int64_t routed_expert_params(const ModelSpec& model) {
  const auto& moe = *model.moe;
  const int64_t w = moe.latent_size > 0 ? moe.latent_size : model.hidden_size;
  return ffn_matrix_params(model, w, moe.expert_intermediate_size) +
         ffn_bias_params(model, w, moe.expert_intermediate_size);
}

LayerParams layer_params(const ModelSpec& m, int64_t layer) {
  const LayerKinds kinds = m.layer_kinds[static_cast<size_t>(layer - 1)];
  const int64_t d = m.hidden_size;
  LayerParams p;
  p.non_expert = attention_block(m, kinds.attention).total() + m.norms_per_layer() * norm_params(m, d);
  if (kinds.attention == AttentionKind::mla_dsa) p.non_expert += dsa_indexer_block(m).total();
  if (m.attention_residuals) p.non_expert += 2 * d;
  if (kinds.ffn == FfnKind::dense) {
    const int64_t f = m.dense_ffn->intermediate_size;
    p.non_expert += ffn_matrix_params(m, d, f) + ffn_bias_params(m, d, f);
    return p;
  }
  const auto& moe = *m.moe;
  const int64_t fs = moe.shared_intermediate_size > 0 ? moe.shared_intermediate_size : moe.expert_intermediate_size;
  p.non_expert += moe.num_shared_experts * (ffn_matrix_params(m, d, fs) + ffn_bias_params(m, d, fs));
  if (moe.latent_size > 0) p.non_expert += 2 * d * moe.latent_size + moe.latent_size;
  p.non_expert += moe.num_experts * d + (moe.router.expert_bias ? moe.num_experts : 0);
  p.expert = moe.num_experts * routed_expert_params(m);
  return p;
}

ParamReport count_params(const ModelSpec& m) {
  const int64_t d = m.hidden_size;
  struct Acc {
    int64_t params = 0;
    double active = 0;
  };
  std::map<std::string, Acc> acc;
  std::vector<std::string> order;
  auto add = [&](const std::string& name, int64_t params, double active) {
    if (!acc.contains(name)) order.push_back(name);
    acc[name].params += params;
    acc[name].active += active;
  };

  add("embedding", m.vocab_size * d, m.tie_word_embeddings ? static_cast<double>(m.vocab_size * d) : 0.0);
  if (m.position == PositionKind::learned) add("position_embedding", m.max_position_embeddings * d, 0.0);

  for (const auto& layer : m.layer_kinds) {
    const Block attn = attention_block(m, layer.attention);
    const std::string attn_name = "attention." + std::string(enum_name(layer.attention == AttentionKind::mla_dsa
                                                                            ? AttentionKind::mla
                                                                            : layer.attention));
    add(attn_name, attn.total(), static_cast<double>(attn.total()));
    if (layer.attention == AttentionKind::mla_dsa) {
      const Block idx = dsa_indexer_block(m);
      add("attention.dsa_indexer", idx.total(), static_cast<double>(idx.total()));
    }
    const int64_t norms = m.norms_per_layer() * norm_params(m, d);
    add("norms", norms, static_cast<double>(norms));

    if (layer.ffn == FfnKind::dense) {
      const int64_t f = m.dense_ffn->intermediate_size;
      const int64_t p = ffn_matrix_params(m, d, f) + ffn_bias_params(m, d, f);
      add("ffn.dense", p, static_cast<double>(p));
    } else {
      const auto& moe = *m.moe;
      const int64_t expert = routed_expert_params(m);
      add("moe.routed_experts", moe.num_experts * expert, static_cast<double>(moe.top_k * expert));
      if (moe.num_shared_experts > 0) {
        const int64_t fs = moe.shared_intermediate_size > 0 ? moe.shared_intermediate_size : moe.expert_intermediate_size;
        const int64_t p = moe.num_shared_experts * (ffn_matrix_params(m, d, fs) + ffn_bias_params(m, d, fs));
        add("moe.shared_experts", p, static_cast<double>(p));
      }
      if (moe.latent_size > 0) {
        const int64_t p = 2 * d * moe.latent_size + moe.latent_size;  // down, up, latent norm
        add("moe.latent_projections", p, static_cast<double>(p));
      }
      const int64_t router = moe.num_experts * d + (moe.router.expert_bias ? moe.num_experts : 0);
      add("moe.router", router, static_cast<double>(router));
    }
  }
  add("norms", norm_params(m, d), static_cast<double>(norm_params(m, d)));  // final norm
  if (m.attention_residuals) {
    // One pseudo-query (d) per sub-layer, attention and FFN.
    const int64_t p = 2 * m.num_layers * d;
    add("attention_residuals", p, static_cast<double>(p));
  }
  if (!m.tie_word_embeddings) add("lm_head", m.vocab_size * d, static_cast<double>(m.vocab_size * d));
  if (m.vision) add("vision", vision_params(*m.vision) + vision_projector_params(*m.vision, d), 0.0);

  ParamReport r;
  for (const auto& name : order) {
    const Acc& a = acc[name];
    const Dtype dtype = name == "moe.routed_experts" ? m.routed_expert_dtype() : m.weight_dtype;
    r.components.push_back(ComponentCount{name, a.params, a.active, dtype});
    r.total_params += a.params;
    if (name == "vision") {
      r.vision_params += a.params;
    } else {
      r.text_params += a.params;
    }
    r.active_params += a.active;
    r.weight_bytes[dtype] += static_cast<double>(a.params) * dtype_bytes(dtype);
    r.total_weight_bytes += static_cast<double>(a.params) * dtype_bytes(dtype);
  }
  r.active_params_with_embedding =
      r.active_params + (m.tie_word_embeddings ? 0.0 : static_cast<double>(m.vocab_size * d));
  return r;
}

std::map<std::string, double> attention_core_flops(const ModelSpec& m, AttentionKind kind, int64_t seq_len) {
  const double n = static_cast<double>(seq_len);
  std::map<std::string, double> out;
  switch (kind) {
    case AttentionKind::mha:
    case AttentionKind::gqa: {
      const auto& g = *m.gqa;
      out["gqa_dense"] = static_cast<double>(g.num_heads * 2 * g.head_dim) * (n + 1);
      break;
    }
    case AttentionKind::mla: {
      const auto& a = *m.mla;
      out["mla_dense"] =
          static_cast<double>(a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)) * (n + 1);
      break;
    }
    case AttentionKind::mla_dsa: {
      const auto& a = *m.mla;
      const auto& x = *m.dsa_indexer;
      out["dsa_indexer"] = static_cast<double>(x.num_heads * x.head_dim) * (n + 1);
      // Absorbed (MQA) form: each selected latent (kv_lora + rope) is the key, the latent the value.
      out["dsa_sparse_attention"] = 2.0 * static_cast<double>(a.num_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim)) *
                                    mean_causal_keys(seq_len, x.top_k);
      break;
    }
    case AttentionKind::kda: {
      const auto& k = *m.kda;
      const double dh = static_cast<double>(k.head_dim);
      const double c = static_cast<double>(std::min(k.chunk_size, seq_len));
      out["kda_core"] = static_cast<double>(k.num_heads) * (6 * dh * dh + 3 * c * dh + c * c);
      out["kda_short_conv"] = 2.0 * static_cast<double>(3 * k.num_heads * k.head_dim * k.short_conv_kernel);
      break;
    }
  }
  return out;
}

FlopReport count_flops(const ModelSpec& m, int64_t seq_len) {
  FlopReport r;
  r.seq_len = seq_len;
  const int64_t d = m.hidden_size;
  double matrix = static_cast<double>(m.vocab_size * d);  // LM head
  for (const auto& layer : m.layer_kinds) {
    matrix += static_cast<double>(attention_block(m, layer.attention).matrix);
    if (layer.attention == AttentionKind::mla_dsa) matrix += static_cast<double>(dsa_indexer_block(m).matrix);
    for (const auto& [term, flops] : attention_core_flops(m, layer.attention, seq_len)) r.attention_fwd[term] += flops;
    if (layer.ffn == FfnKind::dense) {
      matrix += static_cast<double>(ffn_matrix_params(m, d, m.dense_ffn->intermediate_size));
    } else {
      const auto& moe = *m.moe;
      const int64_t w = moe.latent_size > 0 ? moe.latent_size : d;
      matrix += static_cast<double>(moe.top_k * ffn_matrix_params(m, w, moe.expert_intermediate_size));
      const int64_t fs = moe.shared_intermediate_size > 0 ? moe.shared_intermediate_size : moe.expert_intermediate_size;
      matrix += static_cast<double>(moe.num_shared_experts * ffn_matrix_params(m, d, fs));
      if (moe.latent_size > 0) matrix += static_cast<double>(2 * d * moe.latent_size);
      matrix += static_cast<double>(moe.num_experts * d);  // router
    }
  }
  r.matmul_fwd = 2.0 * matrix;
  r.fwd = r.matmul_fwd;
  for (const auto& [term, flops] : r.attention_fwd) r.fwd += flops;
  r.train = 3.0 * r.fwd;
  return r;
}

}  // namespace moesim
