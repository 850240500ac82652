// SPDX-License-Identifier: MIT
// Field declarations and consistency checks of models/*.json.
#include "model/model_spec.hpp"

#include <cstdio>

#include "core/fields.hpp"
#include "core/limits.hpp"

namespace moesim {

using limits::kMaxExperts;
using limits::kMaxHeads;
using limits::kMaxLayers;
using limits::kMaxSmall;
using limits::kMaxWidth;

template <class F>
void declare_fields(F& f, GqaSpec& s) {
  f.required("num_heads", s.num_heads, "Query heads.", positive(kMaxHeads));
  f.required("num_kv_heads", s.num_kv_heads, "Key/value heads (equal to num_heads for mha).", positive(kMaxHeads));
  f.required("head_dim", s.head_dim, "Dimension of each head.", positive(kMaxWidth));
  f.optional("qk_norm", s.qk_norm, false, "RMSNorm on each query and key head (Qwen3).");
}

template <class F>
void declare_fields(F& f, MlaSpec& s) {
  f.required("num_heads", s.num_heads, "Attention heads.", positive(kMaxHeads));
  f.optional("q_lora_rank", s.q_lora_rank, int64_t{0}, "Rank of the query down-projection; 0: none.",
             non_negative(kMaxWidth));
  f.required("kv_lora_rank", s.kv_lora_rank, "Rank of the compressed key/value latent.", positive(kMaxWidth));
  f.required("qk_nope_head_dim", s.qk_nope_head_dim, "Per-head query/key dims without rotary embedding.",
             positive(kMaxWidth));
  f.required("qk_rope_head_dim", s.qk_rope_head_dim, "Per-head query/key dims carrying rotary embedding.",
             non_negative(kMaxWidth));
  f.required("v_head_dim", s.v_head_dim, "Per-head value dims.", positive(kMaxWidth));
  f.optional("output_gate", s.output_gate, OutputGate::none,
             "Gate on the attention output (K3: a sigmoid gate d -> heads*v_head_dim); low_rank is not "
             "supported for MLA.");
}

template <class F>
void declare_fields(F& f, DsaIndexerSpec& s) {
  f.optional("num_heads", s.num_heads, int64_t{64}, "Indexer heads.", positive(kMaxHeads));
  f.optional("head_dim", s.head_dim, int64_t{128}, "Indexer head dimension (one shared key per token).", positive(kMaxWidth));
  f.optional("top_k", s.top_k, int64_t{2048}, "Keys selected per query token for sparse attention.", positive(limits::kMaxSequence));
  f.optional("dtype", s.dtype, Dtype::fp8, "Format the indexer scores are computed in.");
}

template <class F>
void declare_fields(F& f, KdaSpec& s) {
  f.required("num_heads", s.num_heads, "KDA heads.", positive(kMaxHeads));
  f.required("head_dim", s.head_dim, "Key and value dimension per head (dk = dv).", positive(kMaxWidth));
  f.optional("short_conv_kernel", s.short_conv_kernel, int64_t{4},
             "Kernel of the causal depthwise convolution on q, k, v; 0: none.", non_negative(kMaxSmall));
  f.required("decay_gate_rank", s.decay_gate_rank, "Rank of the low-rank per-channel decay gate projection.",
             positive(kMaxWidth));
  f.optional("output_gate", s.output_gate, OutputGate::full, "Gate of the gated output norm.");
  f.optional("output_gate_rank", s.output_gate_rank, int64_t{0},
             "Rank of the output gate when output_gate is low_rank (Kimi Linear: head_dim).", non_negative(kMaxWidth));
  f.optional("chunk_size", s.chunk_size, int64_t{64}, "Chunk length of the chunkwise-parallel training algorithm.",
             positive(kMaxWidth));
}

template <class F>
void declare_fields(F& f, DenseFfnSpec& s) {
  f.required("intermediate_size", s.intermediate_size, "Width of the dense FFN.", positive(kMaxWidth));
}

template <class F>
void declare_fields(F& f, RouterSpec& s) {
  f.optional("score", s.score, RouterScore::softmax, "Router scoring function.");
  f.optional("normalize_top_k", s.normalize_top_k, true, "Renormalise the selected experts' weights.");
  f.optional("expert_bias", s.expert_bias, false,
             "Auxiliary-loss-free balancing bias (one value per expert, DeepSeek-V3 style).");
}

template <class F>
void declare_fields(F& f, MoeSpec& s) {
  f.required("num_experts", s.num_experts, "Routed experts per MoE layer.", positive(kMaxExperts));
  f.required("top_k", s.top_k, "Routed experts each token activates.", positive(kMaxExperts));
  f.required("expert_intermediate_size", s.expert_intermediate_size, "Width of each routed expert's FFN.",
             positive(kMaxWidth));
  f.optional("num_shared_experts", s.num_shared_experts, int64_t{0}, "Shared experts every token passes through.",
             non_negative(kMaxSmall));
  f.optional("shared_intermediate_size", s.shared_intermediate_size, int64_t{0},
             "Width of each shared expert; 0: expert_intermediate_size.", non_negative(kMaxWidth));
  f.optional("latent_size", s.latent_size, int64_t{0},
             "Latent MoE: routed experts run on x projected d -> latent_size and back (with a norm); 0: none.",
             non_negative(kMaxWidth));
  f.optional("router", s.router, RouterSpec{}, "The router.");
}

template <class F>
void declare_fields(F& f, LayerOverride& s) {
  f.required("layers", s.layers, "1-based layers this override applies to, e.g. \"4-92:4,93\".");
  f.maybe("attention", s.attention, "Attention kind of these layers; absent: unchanged.");
  f.maybe("ffn", s.ffn, "FFN kind of these layers; absent: unchanged.");
}

template <class F>
void declare_fields(F& f, LayerPlanSpec& s) {
  f.required("attention", s.attention, "Attention kind of every layer not overridden.");
  f.required("ffn", s.ffn, "FFN kind of every layer not overridden.");
  f.optional("overrides", s.overrides, std::vector<LayerOverride>{},
             "Per-layer-set changes, applied in order (a later one wins).");
}

template <class F>
void declare_fields(F& f, BiasSpec& s) {
  f.optional("qkv", s.qkv, false, "Biases on the q, k, v projections.");
  f.optional("attention_output", s.attention_output, false, "Bias on the attention output projection.");
  f.optional("ffn", s.ffn, false, "Biases in dense FFN and expert matrices.");
}

template <class F>
void declare_fields(F& f, AttentionResidualSpec& s) {
  f.required("block_size", s.block_size,
             "Layers per block; each sub-layer attends over the block summaries and the embedding.", positive(kMaxLayers));
}

template <class F>
void declare_fields(F& f, VisionSpec& s) {
  f.required("num_layers", s.num_layers, "Encoder layers.", positive(kMaxLayers));
  f.required("hidden_size", s.hidden_size, "Encoder width.", positive(kMaxWidth));
  f.required("intermediate_size", s.intermediate_size, "Encoder MLP width (GELU, two matrices, biases).",
             positive(kMaxWidth));
  f.required("num_heads", s.num_heads, "Encoder attention heads.", positive(kMaxHeads));
  f.required("patch_size", s.patch_size, "Square patch side in pixels.", positive(kMaxWidth));
  f.optional("num_channels", s.num_channels, int64_t{3}, "Image channels.", positive(kMaxSmall));
  f.optional("merge_size", s.merge_size, int64_t{1},
             "merge_size x merge_size patch embeddings are concatenated before the projector.", positive(kMaxSmall));
  f.optional("projector_hidden_size", s.projector_hidden_size, int64_t{0},
             "Hidden width of the two-layer projector into the text model; 0: one linear layer.", non_negative(kMaxWidth));
}

template <class F>
void declare_fields(F& f, ModelSpec& s) {
  f.required("name", s.name, "Model name, as the files are named.");
  f.optional("doc", s.doc, std::string(), "Where the numbers come from; free text.");
  f.required("hidden_size", s.hidden_size, "Model width d.", positive(kMaxWidth));
  f.required("num_layers", s.num_layers, "Transformer layers.", positive(kMaxLayers));
  f.required("vocab_size", s.vocab_size, "Vocabulary size.", positive(limits::kMaxVocab));
  f.optional("tie_word_embeddings", s.tie_word_embeddings, false, "The LM head reuses the input embedding.");
  f.optional("weight_dtype", s.weight_dtype, Dtype::bf16, "Format the released weights are stored in.");
  f.maybe("expert_weight_dtype", s.expert_weight_dtype,
          "Format of the routed experts' weights when it differs from weight_dtype.");
  f.required("activation", s.activation, "FFN activation; swiglu, situ_glu and geglu are gated (3 matrices).");
  f.optional("norm", s.norm, NormKind::rmsnorm, "Normalisation (layernorm has a bias).");
  f.optional("position", s.position, PositionKind::rope, "Position encoding.");
  f.optional("max_position_embeddings", s.max_position_embeddings, int64_t{0},
             "Rows of the learned position table (position = learned only).", non_negative(limits::kMaxSequence));
  f.optional("biases", s.biases, BiasSpec{}, "Which linear layers have biases.");
  f.maybe("gqa", s.gqa, "Configuration of mha/gqa layers.");
  f.maybe("mla", s.mla, "Configuration of mla and mla_dsa layers.");
  f.maybe("dsa_indexer", s.dsa_indexer, "Lightning indexer of mla_dsa layers.");
  f.maybe("kda", s.kda, "Configuration of kda layers.");
  f.maybe("dense_ffn", s.dense_ffn, "Configuration of dense FFN layers.");
  f.maybe("moe", s.moe, "Configuration of MoE FFN layers.");
  f.required("layers", s.layers, "Which attention and FFN kind each layer uses.");
  f.maybe("attention_residuals", s.attention_residuals, "Attention Residuals (block variant); absent: plain residuals.");
  f.optional("parallel_block", s.parallel_block, false,
             "Parallel transformer block: attention and FFN read one norm of the layer input and their outputs are "
             "added to it together, y = x + attn(norm(x)) + ffn(norm(x)) (GPT-J, PaLM, MegaScale); under TP one "
             "all-gather and one reduce-scatter (or all-reduce) a layer. Dense FFN layers only.");
  f.maybe("vision", s.vision, "Vision encoder; absent: text only.");
}

bool ModelSpec::uses(AttentionKind kind) const {
  for (const auto& l : layer_kinds) {
    if (l.attention == kind) return true;
  }
  return false;
}

bool ModelSpec::uses(FfnKind kind) const {
  for (const auto& l : layer_kinds) {
    if (l.ffn == kind) return true;
  }
  return false;
}

int64_t ModelSpec::attention_heads(AttentionKind kind) const {
  switch (kind) {
    case AttentionKind::mha:
    case AttentionKind::gqa: return gqa ? gqa->num_heads : 0;
    case AttentionKind::mla:
    case AttentionKind::mla_dsa: return mla ? mla->num_heads : 0;
    case AttentionKind::kda: return kda ? kda->num_heads : 0;
  }
  return 0;
}

namespace {

// Cross-field checks; every message names the JSON path it concerns.
class ModelChecker {
 public:
  ModelChecker(const std::string& file, ModelSpec& m) : file_(file), m_(m) {}

  void run() {
    resolve_layers();
    check_blocks();
    check_attention();
    check_ffn();
    if (m_.position == PositionKind::learned && m_.max_position_embeddings == 0) {
      fail("/max_position_embeddings", "must be positive when position is learned");
    }
    if (m_.position != PositionKind::learned && m_.max_position_embeddings != 0) {
      fail("/max_position_embeddings", "only applies when position is learned");
    }
    if (m_.parallel_block && m_.uses(FfnKind::moe)) {
      fail("/parallel_block", "needs dense FFN layers (an MoE block enters its own TP region)");
    }
    if (m_.parallel_block && m_.attention_residuals) {
      fail("/parallel_block", "does not combine with /attention_residuals (their sub-layer inputs differ)");
    }
    if (m_.attention_residuals && m_.attention_residuals->block_size > m_.num_layers) {
      fail("/attention_residuals/block_size", "exceeds num_layers (" + std::to_string(m_.num_layers) + ")");
    }
    if (m_.vision && m_.vision->hidden_size % m_.vision->num_heads != 0) {
      fail("/vision/num_heads", "must divide /vision/hidden_size");
    }
    check_size();
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw InputError(file_, path, message);
  }

  void resolve_layers() {
    m_.layer_kinds.assign(static_cast<size_t>(m_.num_layers), LayerKinds{m_.layers.attention, m_.layers.ffn});
    for (size_t i = 0; i < m_.layers.overrides.size(); ++i) {
      const auto& o = m_.layers.overrides[i];
      const std::string path = "/layers/overrides/" + std::to_string(i);
      if (o.layers.is_all()) fail(path + "/layers", "an override needs explicit layers; change the default instead");
      if (o.layers.max_layer() > m_.num_layers) {
        fail(path + "/layers", "layer " + std::to_string(o.layers.max_layer()) + " is outside the model (layers 1-" +
                                   std::to_string(m_.num_layers) + ")");
      }
      if (!o.attention && !o.ffn) fail(path, "sets neither attention nor ffn");
      for (int64_t layer : o.layers.indices()) {
        auto& kinds = m_.layer_kinds[static_cast<size_t>(layer - 1)];
        if (o.attention) kinds.attention = *o.attention;
        if (o.ffn) kinds.ffn = *o.ffn;
      }
    }
  }

  // A block is configured if and only if some layer uses it.
  template <class T>
  void need(const std::optional<T>& block, bool used, const std::string& key, const std::string& user) const {
    if (used && !block) fail("/" + key, "missing: " + user + " layers need it");
    if (!used && block) fail("/" + key, "configured but no layer uses it (see /layers)");
  }

  void check_blocks() {
    need(m_.gqa, m_.uses(AttentionKind::gqa) || m_.uses(AttentionKind::mha), "gqa", "mha/gqa");
    need(m_.mla, m_.uses(AttentionKind::mla) || m_.uses(AttentionKind::mla_dsa), "mla", "mla/mla_dsa");
    need(m_.dsa_indexer, m_.uses(AttentionKind::mla_dsa), "dsa_indexer", "mla_dsa");
    need(m_.kda, m_.uses(AttentionKind::kda), "kda", "kda");
    need(m_.dense_ffn, m_.uses(FfnKind::dense), "dense_ffn", "dense FFN");
    need(m_.moe, m_.uses(FfnKind::moe), "moe", "MoE");
  }

  void check_attention() {
    if (m_.gqa) {
      const auto& g = *m_.gqa;
      if (g.num_heads % g.num_kv_heads != 0) {
        fail("/gqa/num_kv_heads", "must divide num_heads (" + std::to_string(g.num_heads) + "), got " +
                                      std::to_string(g.num_kv_heads));
      }
      if (m_.uses(AttentionKind::mha) && g.num_kv_heads != g.num_heads) {
        fail("/gqa/num_kv_heads", "mha layers need num_kv_heads == num_heads; use gqa for grouped heads");
      }
    }
    if (m_.mla && m_.mla->output_gate == OutputGate::low_rank) {
      fail("/mla/output_gate", "low_rank is not supported for MLA (none or full)");
    }
    if (m_.kda) {
      const auto& k = *m_.kda;
      if (k.output_gate == OutputGate::low_rank && k.output_gate_rank == 0) {
        fail("/kda/output_gate_rank", "must be positive when output_gate is low_rank");
      }
      if (k.output_gate != OutputGate::low_rank && k.output_gate_rank != 0) {
        fail("/kda/output_gate_rank", "only applies when output_gate is low_rank");
      }
    }
  }

  void check_ffn() {
    if (!m_.moe) return;
    const auto& moe = *m_.moe;
    if (moe.top_k > moe.num_experts) {
      fail("/moe/top_k", "must not exceed num_experts (" + std::to_string(moe.num_experts) + "), got " +
                             std::to_string(moe.top_k));
    }
    if (moe.num_shared_experts == 0 && moe.shared_intermediate_size != 0) {
      fail("/moe/shared_intermediate_size", "set but num_shared_experts is 0");
    }
  }

  // Every field is bounded, but their products are not: an upper estimate of the parameter count
  // (in doubles, which cannot overflow here) keeps the exact int64 accounting (accounting.cpp) and
  // everything sized from it far from overflow.
  void check_size() const {
    const auto d = static_cast<double>(m_.hidden_size);
    auto sq = [](double x) { return x * x; };
    double attention = 0;  // per layer, each configured kind: 16 x (sum of its widths)^2 bounds every product
    if (m_.gqa) attention += 16 * sq(d + static_cast<double>(m_.gqa->num_heads + m_.gqa->num_kv_heads) * static_cast<double>(m_.gqa->head_dim));
    if (m_.mla) {
      const auto& a = *m_.mla;
      attention += 16 * sq(d + static_cast<double>(a.q_lora_rank + a.kv_lora_rank) +
                           static_cast<double>(a.num_heads) * static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim));
    }
    if (m_.dsa_indexer) {
      attention += 16 * sq(d + static_cast<double>(m_.dsa_indexer->num_heads + 1) * static_cast<double>(m_.dsa_indexer->head_dim) +
                           static_cast<double>(m_.mla ? m_.mla->q_lora_rank : 0));
    }
    if (m_.kda) {
      const auto& k = *m_.kda;
      attention += 16 * sq(d + static_cast<double>(k.num_heads) * static_cast<double>(k.head_dim) *
                                   static_cast<double>(k.short_conv_kernel + 2) +
                           static_cast<double>(k.decay_gate_rank + k.output_gate_rank));
    }
    double ffn = 0;
    if (m_.dense_ffn) ffn += 4 * d * static_cast<double>(m_.dense_ffn->intermediate_size);
    if (m_.moe) {
      const auto& e = *m_.moe;
      ffn += 4 * static_cast<double>(e.num_experts + e.num_shared_experts + 2) * (d + static_cast<double>(e.latent_size)) *
             static_cast<double>(e.expert_intermediate_size + e.shared_intermediate_size + 1);
    }
    double total = static_cast<double>(m_.num_layers) * (attention + ffn + 8 * d) +
                   (2 * static_cast<double>(m_.vocab_size) + static_cast<double>(m_.max_position_embeddings)) * d;
    if (m_.vision) {
      const auto& v = *m_.vision;
      const double merged = static_cast<double>(v.hidden_size) * static_cast<double>(v.merge_size * v.merge_size);
      total += static_cast<double>(v.num_layers) * 16 * sq(static_cast<double>(v.hidden_size + v.intermediate_size)) +
               sq(static_cast<double>(v.patch_size)) * static_cast<double>(v.num_channels) * static_cast<double>(v.hidden_size) +
               4 * sq(merged + static_cast<double>(v.projector_hidden_size) + d);
    }
    if (!(total <= limits::kMaxParams)) {
      char shown[32];
      std::snprintf(shown, sizeof shown, "%.3g", total);
      fail("/", "the model has about " + std::string(shown) +
                    " parameters, beyond moesim's limit of 1e15 (docs/limits.md); a field is far too large");
    }
  }

  const std::string& file_;
  ModelSpec& m_;
};

}  // namespace

ModelSpec load_model(const InputText& input) {
  const nlohmann::json root = parse_json(input);
  ModelSpec spec;
  FieldReader::read_object(input.name, root, "", spec);
  ModelChecker(input.name, spec).run();
  return spec;
}

std::vector<FieldRow> describe_model_fields() { return FieldDescriber::describe<ModelSpec>(); }

}  // namespace moesim
