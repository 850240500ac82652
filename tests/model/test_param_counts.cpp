// SPDX-License-Identifier: MIT
// Parameter accounting against official totals (docs/modelling.md#reference-models) and against the
// hand derivation of Kimi K3 (docs/modelling.md#kimi-k3).
#include <doctest/doctest.h>

#include "model/accounting.hpp"

using namespace moesim;

namespace {

ModelSpec load(const std::string& name) { return load_model(read_input(name, "models", "MODEL")); }

int64_t component(const ParamReport& r, const std::string& name) {
  for (const auto& c : r.components) {
    if (c.name == name) return c.params;
  }
  FAIL("no component " << name);
  return 0;
}

// Publishers differ on whether the input embedding counts as "activated": Moonshot (K3, as
// docs/modelling.md#kimi-k3 states) and DeepSeek leave it out, Qwen and Mistral count it
// (Qwen3-30B-A3B's 3.3B is 3.04B + its 0.31B embedding).
enum class Active { excluding_embedding, including_embedding };

struct Official {
  const char* model;
  double total;
  double total_tolerance;
  double active;  // 0: dense, not checked apart from total
  Active convention;
};

}  // namespace

TEST_CASE("total and active parameters match the official figures") {
  const Official table[] = {
      {"deepseek-v3", 671e9, 0.005, 37e9, Active::excluding_embedding},
      {"deepseek-v3.2", 671.8e9, 0.005, 37e9, Active::excluding_embedding},  // 671B + ~0.8B indexer
      {"kimi-k2", 1.04e12, 0.02, 32.6e9, Active::excluding_embedding},
      {"qwen3-235b-a22b", 235e9, 0.005, 22e9, Active::including_embedding},
      {"qwen3-30b-a3b", 30.5e9, 0.005, 3.3e9, Active::including_embedding},
      {"mixtral-8x7b", 46.7e9, 0.005, 12.9e9, Active::including_embedding},
      {"mixtral-8x22b", 141e9, 0.005, 39e9, Active::including_embedding},
      {"llama-3.1-405b", 405e9, 0.005, 0, Active::excluding_embedding},
      {"gpt3-175b", 174.6e9, 0.005, 0, Active::excluding_embedding},
  };
  for (const auto& o : table) {
    CAPTURE(o.model);
    const ParamReport r = count_params(load(o.model));
    CHECK(static_cast<double>(r.total_params) == doctest::Approx(o.total).epsilon(o.total_tolerance));
    if (o.active > 0) {
      const double active =
          o.convention == Active::excluding_embedding ? r.active_params : r.active_params_with_embedding;
      CHECK(active == doctest::Approx(o.active).epsilon(0.03));
    }
  }
}

TEST_CASE("Kimi K3: text 2,779.5B, with vision 2.78T, active 104.2B (105.4B with the embedding)") {
  const ParamReport r = count_params(load("kimi-k3"));
  CHECK(static_cast<double>(r.text_params) == doctest::Approx(2779.5e9).epsilon(0.005));
  CHECK(static_cast<double>(r.total_params) == doctest::Approx(2.78e12).epsilon(0.005));
  CHECK(static_cast<double>(r.vision_params) == doctest::Approx(0.4e9).epsilon(0.25));  // "about 0.4B"
  CHECK(r.active_params == doctest::Approx(104.2e9).epsilon(0.03));
  CHECK(r.active_params_with_embedding == doctest::Approx(105.4e9).epsilon(0.03));
  // ~5.6 TB of BF16 weights (docs/modelling.md#kimi-k3).
  CHECK(r.total_weight_bytes == doctest::Approx(5.56e12).epsilon(0.01));
}

TEST_CASE("Kimi K3 components equal the hand derivation of docs/modelling.md#kimi-k3") {
  const ParamReport r = count_params(load("kimi-k3"));
  const double d = 7168, l = 3584, f = 3072, v = 163840;
  CHECK(component(r, "moe.routed_experts") == static_cast<int64_t>(92 * 896 * 3 * l * f));  // 2,722.7B
  CHECK(component(r, "moe.shared_experts") == static_cast<int64_t>(92 * 3 * d * 6144));
  CHECK(component(r, "moe.latent_projections") == static_cast<int64_t>(92 * (2 * d * l + l)));  // + latent norm
  CHECK(component(r, "moe.router") == static_cast<int64_t>(92 * (896 * d + 896)));             // + balancing bias
  CHECK(component(r, "ffn.dense") == static_cast<int64_t>(3 * d * 33792));
  CHECK(component(r, "embedding") == static_cast<int64_t>(v * d));
  CHECK(component(r, "lm_head") == static_cast<int64_t>(v * d));
  // Gated MLA: q_a 11.0M, q_b 28.3M, kv_a 4.1M, kv_b 12.6M, o 88.1M, g 88.1M (+ 2 latent norms).
  const double mla = d * 1536 + 1536 * 96 * 192 + d * 576 + 512 * 96 * 256 + 2 * 96 * 128 * d + 1536 + 512;
  CHECK(component(r, "attention.mla") == static_cast<int64_t>(24 * mla));
  CHECK(mla == doctest::Approx(232.2e6).epsilon(0.001));
  // KDA: q, k, v, o, g = 5 * d * 12288 = 440.4M, + gates and convs ~3.3M.
  const double kda = static_cast<double>(component(r, "attention.kda")) / 69;
  CHECK(kda == doctest::Approx(443.7e6).epsilon(0.001));
  CHECK(kda - 5 * d * 12288 == doctest::Approx(3.3e6).epsilon(0.05));
}

TEST_CASE("Kimi-Linear-48B-A3B: the '48B / A3B' name is rounded; the config adds up to 49.1B / 3.1B") {
  // Hand sum from the HF config (27 layers, d 2304, 256 experts of 1024 top-8 + 1 shared, KDA 32x128
  // in 20 layers, MLA 32 heads in 7): the routed experts alone hold 26 * 256 * 3 * 2304 * 1024 = 47.1B.
  const double d = 2304, p = 4096;
  const double experts = 26.0 * 256 * 3 * d * 1024;
  const double kda = 3 * d * p + p * d + 2 * (d * 128 + 128 * p) + d * 32 + 3 * p * 4 + p + 32 + 128;
  const double mla = d * 32 * 192 + d * 576 + 512 + 512 * 32 * 256 + p * d;
  const double moe_rest = 26 * (3 * d * 1024 + 256 * d + 256);
  const double hand = experts + 20 * kda + 7 * mla + moe_rest + 3 * d * 9216 + 2 * 163840 * d + (2 * 27 + 1) * d;
  const ParamReport r = count_params(load("kimi-linear-48b-a3b"));
  CHECK(static_cast<double>(r.total_params) == doctest::Approx(hand).epsilon(1e-9));
  CHECK(static_cast<double>(r.total_params) == doctest::Approx(48e9).epsilon(0.025));
  CHECK(r.active_params == doctest::Approx(3e9).epsilon(0.04));
}

TEST_CASE("invariants: components sum to the total; active never exceeds total") {
  for (const char* name : {"kimi-k3", "kimi-k3-dsa", "deepseek-v3.2", "gpt3-175b", "mixtral-8x7b"}) {
    CAPTURE(name);
    const ModelSpec m = load(name);
    const ParamReport r = count_params(m);
    int64_t sum = 0;
    double bytes = 0;
    for (const auto& c : r.components) {
      sum += c.params;
      bytes += static_cast<double>(c.params) * dtype_bytes(c.dtype);
      CHECK(c.active_params <= static_cast<double>(c.params) + 1e-6);
      CHECK(c.params > 0);
    }
    CHECK(sum == r.total_params);
    CHECK(bytes == doctest::Approx(r.total_weight_bytes));
    CHECK(r.text_params + r.vision_params == r.total_params);
    CHECK(r.active_params < static_cast<double>(r.text_params));
  }
}

TEST_CASE("the DSA variant adds exactly the indexer to K3") {
  const ParamReport k3 = count_params(load("kimi-k3"));
  const ParamReport dsa = count_params(load("kimi-k3-dsa"));
  // Per layer: q_idx 1536 x 64 x 128, shared key d x 128, head weights d x 64, key LayerNorm 2 x 128.
  const int64_t indexer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 256;
  CHECK(dsa.total_params - k3.total_params == 24 * indexer);
  CHECK(component(dsa, "attention.dsa_indexer") == 24 * indexer);
}

TEST_CASE("weights are counted in their stored formats") {
  const ParamReport v3 = count_params(load("deepseek-v3"));  // released in FP8
  CHECK(v3.weight_bytes.at(Dtype::fp8) == doctest::Approx(static_cast<double>(v3.total_params)));
  const ParamReport gpt3 = count_params(load("gpt3-175b"));  // tied: no lm_head component
  for (const auto& c : gpt3.components) CHECK(c.name != "lm_head");
  CHECK(gpt3.weight_bytes.at(Dtype::fp16) == doctest::Approx(2.0 * static_cast<double>(gpt3.total_params)));
}
