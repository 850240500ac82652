// SPDX-License-Identifier: MIT
// FLOP accounting against closed forms: Kaplan's 2N per token for matmuls, the attention terms of
// docs/modelling.md (#kda, #dsa), and Megatron's per-step count for GPT-3.
#include <doctest/doctest.h>

#include <cmath>

#include "model/accounting.hpp"

using namespace moesim;

namespace {
ModelSpec load(const std::string& name) { return load_model(read_input(name, "models", "MODEL")); }
}  // namespace

TEST_CASE("KDA core: about 12.2 MFLOP per token per layer for K3, independent of context") {
  const ModelSpec k3 = load("kimi-k3");
  for (int64_t n : {int64_t{4096}, int64_t{32768}, int64_t{1} << 20}) {
    const auto terms = attention_core_flops(k3, AttentionKind::kda, n);
    // 96 heads x (6 x 128^2 + 3 x 64 x 128 + 64^2)
    CHECK(terms.at("kda_core") == doctest::Approx(96.0 * (6 * 128 * 128 + 3 * 64 * 128 + 64 * 64)));
    CHECK(terms.at("kda_core") == doctest::Approx(12.2e6).epsilon(0.005));
  }
}

TEST_CASE("DSA: sparse attention is 428 MFLOP per query token at long context with 96 heads") {
  const ModelSpec dsa = load("kimi-k3-dsa");
  const auto long_ctx = attention_core_flops(dsa, AttentionKind::mla_dsa, 1 << 20);
  // 2 x 96 x 2048 x (576 + 512) once every query sees at least 2048 keys; the mean over a 1M
  // sequence is slightly below (the first 2048 positions see fewer).
  const double full = 2.0 * 96 * 2048 * (576 + 512);
  CHECK(full == doctest::Approx(428e6).epsilon(0.001));
  const double n = 1 << 20;
  CHECK(long_ctx.at("dsa_sparse_attention") == doctest::Approx(full * (1 - (2048.0 - 1) / (2 * n))).epsilon(1e-9));
  // Indexer: 2 x 64 x 128 FLOP per (query, key) pair over the causal prefix, (N+1)/2 keys on average.
  CHECK(long_ctx.at("dsa_indexer") == doctest::Approx(2.0 * 64 * 128 * (n + 1) / 2));
  // Below top_k every earlier key is selected: sparse equals dense over the latent.
  const auto short_ctx = attention_core_flops(dsa, AttentionKind::mla_dsa, 1000);
  CHECK(short_ctx.at("dsa_sparse_attention") == doctest::Approx(2.0 * 96 * (576 + 512) * 1001 / 2));
}

TEST_CASE("DSA beats dense MLA per token once context exceeds ~14K (docs/modelling.md#dsa)") {
  const ModelSpec k3 = load("kimi-k3");
  const ModelSpec dsa = load("kimi-k3-dsa");
  auto dense = [&](int64_t n) { return attention_core_flops(k3, AttentionKind::mla, n).at("mla_dense"); };
  auto sparse = [&](int64_t n) {
    const auto t = attention_core_flops(dsa, AttentionKind::mla_dsa, n);
    return t.at("dsa_sparse_attention") + t.at("dsa_indexer");
  };
  CHECK(dense(8192) < sparse(8192));
  CHECK(dense(32768) > sparse(32768));
}

TEST_CASE("matmul FLOPs are twice the active matrix parameters") {
  // A dense model without biases or norms in its matrices: 2 x (active params - norms) per token,
  // the LM head included and the embedding lookup free.
  const ModelSpec llama = load("llama-3.1-405b");
  const ParamReport p = count_params(llama);
  const double norms = (2.0 * 126 + 1) * 16384;
  CHECK(count_flops(llama, 4096).matmul_fwd == doctest::Approx(2.0 * (p.active_params - norms)));
}

TEST_CASE("GPT-3 175B: Megatron's 72 B L s h^2 (1 + s/6h + V/12hL) per step, causal attention halved") {
  // Megatron (Narayanan et al. 2021) counts a training step of batch B as
  //   72 B L s h^2 (1 + s/(6h) + V/(12 h L)),
  // with attention over all s keys. Our attention term is causal: (s+1)/2 keys on average, so the
  // s/(6h) term becomes (s+1)/(12h). Biases, layer norms and learned positions are not in the formula.
  const ModelSpec gpt3 = load("gpt3-175b");
  const double L = 96, h = 12288, V = 50257, s = 2048;
  const double per_token_megatron_causal = 72 * L * h * h * (1 + (s + 1) / (12 * h) + V / (12 * h * L));
  CHECK(count_flops(gpt3, 2048).train == doctest::Approx(per_token_megatron_causal).epsilon(1e-12));
}

TEST_CASE("a training step is three forwards") {
  for (const char* name : {"kimi-k3-dsa", "qwen3-30b-a3b"}) {
    const FlopReport f = count_flops(load(name), 8192);
    CHECK(f.train == doctest::Approx(3 * f.fwd));
    double sum = f.matmul_fwd;
    for (const auto& [term, flops] : f.attention_fwd) sum += flops;
    CHECK(f.fwd == doctest::Approx(sum));
  }
}
