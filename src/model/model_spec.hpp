// SPDX-License-Identifier: MIT
// ModelSpec: the architecture of a model, read from models/*.json. Architecture only - no
// training recipe, no hardware. A new model is a new file, never new code.
//
// Each attention kind and each FFN kind is configured once per model (the "mla", "kda", "gqa",
// "dsa_indexer", "dense_ffn" and "moe" objects); "layers" says which kind each layer uses: a
// default plus overrides on 1-based layer sets. A configured block that no layer uses is an error,
// as is a layer whose kind has no configuration.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/enum_names.hpp"
#include "core/field_row.hpp"
#include "core/json_input.hpp"
#include "core/layer_set.hpp"

namespace moesim {

enum class AttentionKind { mha, gqa, mla, mla_dsa, kda };
enum class FfnKind { dense, moe };
// Gated units (swiglu, situ_glu, geglu) have three matrices, the others two.
enum class Activation { swiglu, situ_glu, geglu, gelu, relu };
enum class NormKind { rmsnorm, layernorm };
enum class PositionKind { none, rope, learned };
enum class RouterScore { softmax, sigmoid };
enum class OutputGate { none, full, low_rank };

constexpr bool is_gated(Activation a) {
  return a == Activation::swiglu || a == Activation::situ_glu || a == Activation::geglu;
}

// Multi-head / grouped-query attention (mha: num_kv_heads == num_heads).
struct GqaSpec {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool qk_norm = false;
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2/K3).
struct MlaSpec {
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;  // 0: q projected directly from the hidden state
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  OutputGate output_gate = OutputGate::none;
};

// DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2), used by mla_dsa layers.
struct DsaIndexerSpec {
  int64_t num_heads = 64;
  int64_t head_dim = 128;
  int64_t top_k = 2048;
  Dtype dtype = Dtype::fp8;
};

// Kimi Delta Attention (Kimi Linear): gated delta-rule linear attention, chunked for training.
struct KdaSpec {
  int64_t num_heads = 0;
  int64_t head_dim = 0;  // dk = dv
  int64_t short_conv_kernel = 4;
  int64_t decay_gate_rank = 0;
  OutputGate output_gate = OutputGate::full;
  int64_t output_gate_rank = 0;  // used when output_gate is low_rank
  int64_t chunk_size = 64;
};

struct DenseFfnSpec {
  int64_t intermediate_size = 0;
};

struct RouterSpec {
  RouterScore score = RouterScore::softmax;
  bool normalize_top_k = true;
  bool expert_bias = false;  // auxiliary-loss-free balancing bias, one per expert
};

struct MoeSpec {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t expert_intermediate_size = 0;
  int64_t num_shared_experts = 0;
  int64_t shared_intermediate_size = 0;  // width of each shared expert; 0: same as the routed experts
  int64_t latent_size = 0;               // "latent MoE": experts run on x projected d -> latent; 0: none
  RouterSpec router;
};

struct LayerOverride {
  LayerSet layers;
  std::optional<AttentionKind> attention;
  std::optional<FfnKind> ffn;
};

struct LayerPlanSpec {
  AttentionKind attention = AttentionKind::gqa;
  FfnKind ffn = FfnKind::dense;
  std::vector<LayerOverride> overrides;
};

struct BiasSpec {
  bool qkv = false;
  bool attention_output = false;
  bool ffn = false;
};

struct AttentionResidualSpec {
  int64_t block_size = 0;
};

// A ViT-style encoder plus a projector into the text model's width.
struct VisionSpec {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_heads = 0;
  int64_t patch_size = 0;
  int64_t num_channels = 3;
  int64_t merge_size = 1;             // merge_size x merge_size patches are concatenated before projection
  int64_t projector_hidden_size = 0;  // 0: a single linear projection
};

// The resolved kinds of one layer.
struct LayerKinds {
  AttentionKind attention;
  FfnKind ffn;
};

struct ModelSpec {
  std::string name;
  std::string doc;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  Dtype weight_dtype = Dtype::bf16;
  std::optional<Dtype> expert_weight_dtype;
  Activation activation = Activation::swiglu;
  NormKind norm = NormKind::rmsnorm;
  PositionKind position = PositionKind::rope;
  int64_t max_position_embeddings = 0;
  BiasSpec biases;
  std::optional<GqaSpec> gqa;
  std::optional<MlaSpec> mla;
  std::optional<DsaIndexerSpec> dsa_indexer;
  std::optional<KdaSpec> kda;
  std::optional<DenseFfnSpec> dense_ffn;
  std::optional<MoeSpec> moe;
  LayerPlanSpec layers;
  std::optional<AttentionResidualSpec> attention_residuals;
  // Attention and FFN computed from one norm of the layer input and added to it together (GPT-J,
  // PaLM, MegaScale's parallel transformer block): one norm and one TP region a layer.
  bool parallel_block = false;
  std::optional<VisionSpec> vision;

  // Norms of one transformer layer: 1 with parallel_block, else 2.
  int64_t norms_per_layer() const { return parallel_block ? 1 : 2; }

  // Derived at load time from `layers`: the kinds of layer i+1 at index i.
  std::vector<LayerKinds> layer_kinds;

  // Whether some layer uses this kind (valid once layer_kinds is resolved).
  bool uses(AttentionKind kind) const;
  bool uses(FfnKind kind) const;
  // Heads of the attention kind `kind` (for tensor-parallel divisibility and FLOPs).
  int64_t attention_heads(AttentionKind kind) const;
  Dtype routed_expert_dtype() const { return expert_weight_dtype.value_or(weight_dtype); }
};

// Reads, checks and resolves a model file; throws InputError naming the file and JSON path.
ModelSpec load_model(const InputText& input);
// One row per declared field, for `moesim describe model` and docs/inputs.md.
std::vector<FieldRow> describe_model_fields();

template <>
struct EnumNames<AttentionKind> {
  static constexpr std::array<std::pair<std::string_view, AttentionKind>, 5> names{{
      {"mha", AttentionKind::mha},
      {"gqa", AttentionKind::gqa},
      {"mla", AttentionKind::mla},
      {"mla_dsa", AttentionKind::mla_dsa},
      {"kda", AttentionKind::kda},
  }};
};
template <>
struct EnumNames<FfnKind> {
  static constexpr std::array<std::pair<std::string_view, FfnKind>, 2> names{{
      {"dense", FfnKind::dense},
      {"moe", FfnKind::moe},
  }};
};
template <>
struct EnumNames<Activation> {
  static constexpr std::array<std::pair<std::string_view, Activation>, 5> names{{
      {"swiglu", Activation::swiglu},
      {"situ_glu", Activation::situ_glu},
      {"geglu", Activation::geglu},
      {"gelu", Activation::gelu},
      {"relu", Activation::relu},
  }};
};
template <>
struct EnumNames<NormKind> {
  static constexpr std::array<std::pair<std::string_view, NormKind>, 2> names{{
      {"rmsnorm", NormKind::rmsnorm},
      {"layernorm", NormKind::layernorm},
  }};
};
template <>
struct EnumNames<PositionKind> {
  static constexpr std::array<std::pair<std::string_view, PositionKind>, 3> names{{
      {"none", PositionKind::none},
      {"rope", PositionKind::rope},
      {"learned", PositionKind::learned},
  }};
};
template <>
struct EnumNames<RouterScore> {
  static constexpr std::array<std::pair<std::string_view, RouterScore>, 2> names{{
      {"softmax", RouterScore::softmax},
      {"sigmoid", RouterScore::sigmoid},
  }};
};
template <>
struct EnumNames<OutputGate> {
  static constexpr std::array<std::pair<std::string_view, OutputGate>, 3> names{{
      {"none", OutputGate::none},
      {"full", OutputGate::full},
      {"low_rank", OutputGate::low_rank},
  }};
};

}  // namespace moesim
