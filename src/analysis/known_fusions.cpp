// SPDX-License-Identifier: MIT
#include "analysis/known_fusions.hpp"

#include <algorithm>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "engine/power_runs.hpp"
#include "graph/step_graph.hpp"

namespace moesim {

namespace {

struct Switch {
  const char* field;
  const char* value;
  const char* what;
  std::vector<std::string> constraints;
};

// The switches `s` leaves off and its model can use, with what each fuses.
std::vector<Switch> switches_off(const Scenario& s) {
  const FusedOpsSpec& f = s.spec.fused_ops;
  const ModelSpec& m = s.model;
  const bool dense_attention = m.uses(AttentionKind::mha) || m.uses(AttentionKind::gqa) || m.uses(AttentionKind::mla) ||
                               m.uses(AttentionKind::mla_dsa);
  std::vector<Switch> out;
  if (!f.dsa && m.uses(AttentionKind::mla_dsa)) {
    out.push_back({"/fused_ops/dsa", "true",
                   "DSA: the lightning indexer's score and top-k, the key gather and sparse attention as the LI and SFA "
                   "kernels (SFAG in backward)",
                   {"forward and backward", "the gathered keys and the indexer scores are no longer written to HBM"}});
  }
  if (!f.kda && m.uses(AttentionKind::kda)) {
    out.push_back({"/fused_ops/kda", "true",
                   "KDA: gate cumsum, intra-chunk WY factors, inter-chunk states and output in one forward and one "
                   "backward kernel",
                   {"forward and backward", "the fused backward recomputes the WY factors and chunk states it no "
                                            "longer keeps"}});
  }
  if (!f.permute_gemm && m.moe) {
    out.push_back({"/fused_ops/permute_gemm", "true",
                   "MoE: the permute of routed tokens folded into the experts' up-projection (rows gathered on load)",
                   {"routing-dependent sizes", "the permuted copy of the tokens is never written"}});
  }
  if (s.spec.loss.kind != LossKind::cce) {
    // CCE needs a vocabulary chunk: 8,192 entries, as the shipped scenarios use.
    out.push_back({"/loss", R"({"kind": "cce", "vocab_chunk": 8192})",
                   "loss: the vocabulary projection, softmax and cross-entropy fused, vocabulary chunk by chunk (CCE)",
                   {"forward and backward", "the logits are never materialised"}});
  }
  if (!f.flash_attention && dense_attention) {
    out.push_back({"/fused_ops/flash_attention", "true",
                   "attention: scores, softmax, dropout and context in one flash-attention kernel",
                   {"forward and backward", "the s x s probabilities are no longer kept for backward"}});
  }
  const TensorParallelSpec& tp = s.spec.parallel.tp;
  if (tp.degree > 1 && tp.sequence_parallel && tp.comm_overlap == TpCommOverlap::none) {
    out.push_back({"/parallel/tp/comm_overlap", "\"fused\"",
                   "TP: each attention and dense-FFN projection's sequence-parallel all-gather or reduce-scatter fused "
                   "into its GEMM as ring steps, one kernel per projection (Flux)",
                   {"forward and backward", "hides the TP collectives behind the projections; each split projection "
                                            "launches twice, and its bytes stay"}});
  }
  if (f.elementwise != ElementwiseExecution::fused) {
    out.push_back({"/fused_ops/elementwise", "\"fused\"",
                   "norms and activations as one hand-written kernel each, RoPE inside the attention input",
                   {"forward and backward"}});
  }
  return out;
}

struct ProgramWork {
  int64_t kernels = 0;
  double bytes = 0;
  double kept = 0;
};

ProgramWork work_of(const Program& p) {
  ProgramWork w;
  for (const Op& op : p.ops) {
    if (op.stream != Stream::compute) continue;
    w.kernels += op.num_kernels;
    w.bytes += op.bytes_read + op.bytes_written;
  }
  w.kept = kept_activation_bytes(p);
  return w;
}

double peak_of(const StepResult& r) {
  double peak = 0;
  for (const RankMemory& m : r.memory) peak = std::max(peak, m.peak_hbm_bytes);
  return peak;
}

}  // namespace

double kept_activation_bytes(const Program& p) {
  constexpr auto kNone = std::numeric_limits<uint8_t>::max();
  std::vector<uint8_t> allocated_in(p.buffers.size(), kNone);
  double kept = 0;
  for (const Op& op : p.ops) {
    for (const MemEffect& e : p.effects_of(op)) {
      const Buffer& b = p.buffers[e.buffer];
      if (b.category != MemCategory::activation && b.category != MemCategory::logits) continue;
      if (e.action == MemAction::alloc) {
        allocated_in[e.buffer] = static_cast<uint8_t>(op.phase);
      } else if (e.action == MemAction::free && op.phase == Phase::bwd) {
        const uint8_t from = allocated_in[e.buffer];
        if (from == static_cast<uint8_t>(Phase::fwd) || from == static_cast<uint8_t>(Phase::recompute)) kept += b.bytes;
      }
    }
  }
  return kept;
}

std::vector<KnownFusion> known_fusions(const InputText& input, const Scenario& s, const StepGraph& baseline,
                                       double baseline_step_s, double baseline_peak_hbm_bytes,
                                       const EngineOptions& engine) {
  const nlohmann::json root = nlohmann::json::parse(input.text);
  std::vector<ProgramWork> base;
  for (const Program& p : baseline.programs) base.push_back(work_of(p));
  std::vector<KnownFusion> out;
  for (const Switch& sw : switches_off(s)) {
    nlohmann::json variant = root;
    variant[nlohmann::json::json_pointer(sw.field)] = nlohmann::json::parse(sw.value);
    KnownFusion k;
    k.field = sw.field;
    k.value = sw.value;
    k.what = sw.what;
    k.constraints = sw.constraints;
    std::optional<Scenario> loaded;
    try {
      loaded = load_scenario(InputText{input.name, variant.dump(), input.embedded});
    } catch (const InputError& e) {
      // The plan refuses the switch (a check of the fused form): a candidate that cannot be simulated.
      k.not_simulated = std::string(e.what());
      out.push_back(std::move(k));
      continue;
    }
    const Scenario& fused = *loaded;
    const StepGraph g = build_step_graph(fused);
    // Programs are the pipeline stages, the same in both graphs (a switch changes no plan field).
    k.launches_saved_per_rank = std::numeric_limits<int64_t>::min();
    k.hbm_bytes_saved_per_rank = k.kept_activation_bytes_saved = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < g.programs.size() && i < base.size(); ++i) {
      const ProgramWork w = work_of(g.programs[i]);
      k.launches_saved_per_rank = std::max(k.launches_saved_per_rank, base[i].kernels - w.kernels);
      k.hbm_bytes_saved_per_rank = std::max(k.hbm_bytes_saved_per_rank, base[i].bytes - w.bytes);
      k.kept_activation_bytes_saved = std::max(k.kept_activation_bytes_saved, base[i].kept - w.kept);
    }
    const StepResult r = simulate_step_in_power_state(g, CostModel(fused.hardware), engine).results.front();
    k.step_time_s = static_cast<double>(r.step_time) * 1e-12;
    k.step_delta_s = k.step_time_s - baseline_step_s;
    k.peak_hbm_bytes = peak_of(r);
    k.peak_delta_bytes = k.peak_hbm_bytes - baseline_peak_hbm_bytes;
    out.push_back(std::move(k));
  }
  // Simulated ones by their step gain, then those the plan refused.
  std::stable_sort(out.begin(), out.end(), [](const KnownFusion& a, const KnownFusion& b) {
    if (a.not_simulated.empty() != b.not_simulated.empty()) return a.not_simulated.empty();
    return a.step_delta_s < b.step_delta_s;
  });
  return out;
}

}  // namespace moesim
