// SPDX-License-Identifier: MIT
// The known large fusions (analysis/known_fusions.hpp): activations kept from forward to backward
// by their closed form on a hand-built program; exactly the switches a scenario leaves off and its
// model can use are candidates; each is the scenario with that switch on, simulated; and the
// unfused KDA's kept stages (cumulative gates, WY factors, chunk states) are exactly what the
// fused kernel saves.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "analysis/known_fusions.hpp"
#include "core/json_input.hpp"
#include "engine/power_runs.hpp"

using namespace moesim;

namespace {

// The one-GPU K3 slice (KDA and DSA layers, MoE) with every fused-kernel switch off and the full loss.
InputText unfused_k3_slice() {
  const InputText base = read_input("scenarios/calibration/k3-slice-1gpu.json", "scenarios", "SCENARIO");
  nlohmann::json j = nlohmann::json::parse(base.text);
  j["fused_ops"] = {{"dsa", false}, {"kda", false}, {"permute_gemm", false}};
  j["loss"] = {{"kind", "full"}};
  return InputText{base.name, j.dump(), base.embedded};
}

// The step as `simulate` runs it: in its own power state.
double step_s(const StepGraph& g, const Scenario& s) {
  return static_cast<double>(simulate_step_in_power_state(g, CostModel(s.hardware), {}).results.front().step_time) * 1e-12;
}

// Bytes of the baseline's kept buffers whose names end with one of `suffixes`, over one program.
double kept_named(const Program& p, const std::vector<std::string>& suffixes) {
  std::vector<int> from(p.buffers.size(), -1);
  double bytes = 0;
  for (const Op& op : p.ops) {
    for (const MemEffect& e : p.effects_of(op)) {
      if (e.action == MemAction::alloc) from[e.buffer] = static_cast<int>(op.phase);
      if (e.action != MemAction::free || op.phase != Phase::bwd) continue;
      if (from[e.buffer] != static_cast<int>(Phase::fwd) && from[e.buffer] != static_cast<int>(Phase::recompute)) continue;
      const std::string& name = p.names[p.buffers[e.buffer].name];
      if (std::any_of(suffixes.begin(), suffixes.end(), [&](const std::string& s) { return name.ends_with(s); })) {
        bytes += p.buffers[e.buffer].bytes;
      }
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("kept activations: allocated in forward or recompute, freed in backward; activations and logits only") {
  Program p;
  ProgramWriter w(p);
  const uint32_t kept = w.buffer(1000, MemCategory::activation, "kept");
  const uint32_t transient = w.buffer(200, MemCategory::activation, "transient");
  const uint32_t recomputed = w.buffer(30, MemCategory::activation, "recomputed");
  const uint32_t logits = w.buffer(4, MemCategory::logits, "logits");
  const uint32_t gathered = w.buffer(50000, MemCategory::gathered_params, "params");
  const uint32_t grad = w.buffer(70000, MemCategory::gradient, "grad");
  const auto add = [&](Phase phase, std::initializer_list<std::pair<uint32_t, MemAction>> effects) {
    Op op;
    op.kind = OpKind::elementwise;
    op.phase = phase;
    const uint32_t i = w.add(op, "op");
    for (const auto& [b, a] : effects) w.effect(i, b, a);
  };
  add(Phase::fwd, {{kept, MemAction::alloc}, {transient, MemAction::alloc}, {gathered, MemAction::alloc}, {logits, MemAction::alloc}});
  add(Phase::fwd, {{transient, MemAction::free}});
  add(Phase::recompute, {{recomputed, MemAction::alloc}});
  add(Phase::bwd, {{grad, MemAction::alloc}, {kept, MemAction::free}, {recomputed, MemAction::free},
                   {gathered, MemAction::free}, {logits, MemAction::free}});
  add(Phase::bwd, {{grad, MemAction::free}});
  CHECK(kept_activation_bytes(p) == 1000 + 30 + 4);
}

TEST_CASE("known fusions: the switches left off, each simulated with it on; the fused KDA saves its kept stages") {
  const InputText input = unfused_k3_slice();
  const Scenario s = load_scenario(input);
  const StepGraph g = build_step_graph(s);
  const double base_step = step_s(g, s);
  const std::vector<KnownFusion> known = known_fusions(input, s, g, base_step, 0, {});
  std::set<std::string> fields;
  for (const KnownFusion& k : known) fields.insert(k.field);
  // K3 has DSA and KDA layers and routed experts; flash attention and fused elementwise are on already.
  CHECK(fields == std::set<std::string>{"/fused_ops/dsa", "/fused_ops/kda", "/fused_ops/permute_gemm", "/loss"});
  for (size_t i = 1; i < known.size(); ++i) CHECK(known[i - 1].step_delta_s <= known[i].step_delta_s);

  for (const KnownFusion& k : known) {
    CAPTURE(k.field);
    REQUIRE(k.not_simulated.empty());
    nlohmann::json j = nlohmann::json::parse(input.text);
    j[nlohmann::json::json_pointer(k.field)] = nlohmann::json::parse(k.value);
    const Scenario fused = load_scenario(InputText{input.name, j.dump(), input.embedded});
    const StepGraph fg = build_step_graph(fused);
    CHECK(k.step_time_s == step_s(fg, fused));
    CHECK(k.step_delta_s == k.step_time_s - base_step);
    CHECK(k.launches_saved_per_rank > 0);
    CHECK(k.hbm_bytes_saved_per_rank > 0);
    CHECK(k.kept_activation_bytes_saved == kept_activation_bytes(g.programs[0]) - kept_activation_bytes(fg.programs[0]));
    if (k.field == "/fused_ops/kda") {
      // The unfused stages keep their outputs for the backward; the fused kernel recomputes them.
      const double stages = kept_named(g.programs[0], {"attn.kda_gate_cumsum", "attn.kda_wy", "attn.kda_states"});
      CHECK(stages > 0);
      CHECK(k.kept_activation_bytes_saved == doctest::Approx(stages).epsilon(1e-12));
    }
    if (k.field == "/loss") CHECK(k.kept_activation_bytes_saved > 0);  // the logits
  }
}

TEST_CASE("known fusions: none when every switch is on") {
  const InputText input = read_input("scenarios/calibration/k3-slice-1gpu.json", "scenarios", "SCENARIO");
  const Scenario s = load_scenario(input);
  REQUIRE(s.spec.fused_ops.dsa);
  REQUIRE(s.spec.fused_ops.kda);
  REQUIRE(s.spec.fused_ops.permute_gemm);
  REQUIRE(s.spec.loss.kind == LossKind::cce);
  CHECK(known_fusions(input, s, build_step_graph(s), 0, 0, {}).empty());
}

TEST_CASE("known fusions: a sequence-parallel TP plan gets TP communication fused into its projections") {
  // Llama 3.1 8B over TP8 on H200s, 8,192-token sequences: the TP collectives take longer than the
  // projections, so hiding them behind the GEMMs shortens the step.
  const std::string text = R"({"name": "t", "model": "llama-3.1-8b", "hardware": "h200-hgx", "num_devices": 16,
    "training": {"mode": "pretrain"}, "batch": {"global_batch_size": 4, "micro_batch_size": 1, "sequence_length": 8192},
    "parallel": {"fsdp": {"shard": 2}, "tp": {"degree": 8, "sequence_parallel": true}},
    "recompute": {"policy": "full"}, "loss": {"kind": "cce", "vocab_chunk": 8192}})";
  const InputText input{"t.json", text, false};
  const Scenario s = load_scenario(input);
  const StepGraph g = build_step_graph(s);
  const double base_step = step_s(g, s);
  const std::vector<KnownFusion> known = known_fusions(input, s, g, base_step, 0, {});
  const auto tp = std::find_if(known.begin(), known.end(),
                               [](const KnownFusion& k) { return k.field == "/parallel/tp/comm_overlap"; });
  REQUIRE(tp != known.end());
  CHECK(tp->value == "\"fused\"");
  REQUIRE(tp->not_simulated.empty());
  CHECK(tp->step_delta_s < 0);
  CHECK(tp->launches_saved_per_rank < 0);  // each split projection launches twice
  CHECK(tp->kept_activation_bytes_saved <= 0);
}
