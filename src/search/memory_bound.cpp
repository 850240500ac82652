// SPDX-License-Identifier: MIT
#include "search/memory_bound.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "model/accounting.hpp"

namespace moesim {

std::vector<double> persistent_lower_bound_per_stage(const Scenario& s) {
  const ScenarioSpec& spec = s.spec;
  const ModelSpec& m = s.model;
  const auto& p = spec.parallel;
  const auto& prec = spec.training.precision;
  const bool train_base = spec.training.mode != TrainingMode::lora;
  const double states = spec.training.optimizer.kind == OptimizerKind::adamw ? 2.0 : 1.0;
  // Bytes per stored parameter: trainable weights keep master, gradient and optimizer states
  // (their working copy is gathered, not stored); frozen ones are stored at param precision.
  const double per_param = train_base ? dtype_bytes(prec.master_params) + dtype_bytes(prec.grads) +
                                            states * dtype_bytes(prec.optimizer_states)
                                      : dtype_bytes(prec.params);
  const auto tp = static_cast<double>(p.tp.degree);
  const auto fsdp = static_cast<double>(p.fsdp.shard * p.cp);
  const auto edp = static_cast<double>(p.fsdp.shard * p.cp / p.ep);

  const int64_t stages = p.pp.stages;
  const int64_t chunks = p.pp.virtual_stages;
  const int64_t per_chunk = m.num_layers / (stages * chunks);
  std::vector<double> out(static_cast<size_t>(stages), 0.0);
  for (int64_t stage = 0; stage < stages; ++stage) {
    double params = 0;  // per rank
    if (stage == 0) {
      double embedding = static_cast<double>(m.vocab_size * m.hidden_size);
      if (m.position == PositionKind::learned)
        embedding += static_cast<double>(m.max_position_embeddings * m.hidden_size);
      params += embedding / fsdp;
    }
    if (stage == (stages * chunks - 1) % stages) {
      const double head = m.tie_word_embeddings ? 0.0 : static_cast<double>(m.vocab_size * m.hidden_size) / tp;
      params += (head + static_cast<double>(m.hidden_size)) / fsdp;
    }
    for (int64_t v = 0; v < chunks; ++v) {
      const int64_t g = v * stages + stage;
      for (int64_t l = g * per_chunk + 1; l <= (g + 1) * per_chunk; ++l) {
        const LayerParams lp = layer_params(m, l);
        params += static_cast<double>(lp.non_expert) / tp / fsdp;
        params += static_cast<double>(lp.expert) / (static_cast<double>(p.ep) * tp) / edp;
      }
    }
    // The runtime's reserve is on every rank; the communicators' buffers depend on the ops (left out).
    out[static_cast<size_t>(stage)] = params * per_param + runtime_reserved_bytes(spec, s.hardware);
  }
  return out;
}

double persistent_lower_bound_bytes(const Scenario& s) {
  const std::vector<double> stages = persistent_lower_bound_per_stage(s);
  return *std::max_element(stages.begin(), stages.end());
}

}  // namespace moesim
