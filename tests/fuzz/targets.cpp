// SPDX-License-Identifier: MIT
#include "targets.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"
#include "cost/calibration.hpp"
#include "cost/cost_model.hpp"
#include "engine/engine.hpp"
#include "graph/graph_json.hpp"
#include "graph/step_graph.hpp"
#include "hardware/hardware_spec.hpp"
#include "model/model_spec.hpp"
#include "scenario/scenario_spec.hpp"
#include "trace/kineto_trace.hpp"

namespace moesim::fuzz {
namespace {

// The simulate target's budget, so that each input takes milliseconds and the fuzzer explores
// many: a scenario with more devices or more layer passes per step (micro-batches x layers) is
// loaded and checked but not built. Scenarios at moesim's own limits are the bad-input suite's
// bound cases (tests/data/make_bad_inputs.py), which run under a time and memory bound.
constexpr int64_t kMaxDevices = 1024;
constexpr int64_t kMaxLayerPasses = 2048;
// Events simulated: the first ops of every rank start and end, the first collectives meet.
constexpr int64_t kMaxEvents = 4000;

bool within_budget(const Scenario& s) {
  const ParallelSpec& p = s.spec.parallel;
  const int64_t per_step = s.spec.batch.micro_batch_size * p.dp();  // both bounded: no overflow
  const int64_t micro_batches = s.spec.batch.global_batch_size / per_step;
  return s.spec.num_devices <= kMaxDevices && micro_batches * (s.model.num_layers + 2) <= kMaxLayerPasses;
}

// From a scenario to its first simulated events: load and check (with the shipped model and
// hardware it names), build the step graph, cost it, run the engine for kMaxEvents events.
void simulate_first_events(const InputText& input) {
  const Scenario s = load_scenario(input);
  if (!within_budget(s)) return;
  const StepGraph graph = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine engine(graph, cost);
  EngineOptions options;
  options.max_events = kMaxEvents;
  options.rank_speed = rank_speeds(s.spec);
  options.distinct_ranks = true;
  const StepResult r = engine.run(options);
  // Time never runs backwards nor past the engine's clock: an overflowed time is a finding.
  if (r.step_time < 0 || static_cast<double>(r.step_time) > limits::kMaxSimulatedSeconds * 1e12) {
    throw std::logic_error("simulated time " + std::to_string(r.step_time) + " ps is outside the engine's clock");
  }
}

// Where an input of each target poses as a shipped file (embedded), so that the files it names
// relative to itself are shipped ones: a hardware file's calibration ("calibration/h200.json"), a
// scenario's model and hardware ("../../models/x.json", as the scenarios of scenarios/*/ name
// them; run.sh rewrites the seeds of scenarios/ to match).
std::string posed_name(std::string_view target) {
  if (target == "model") return "models/fuzz.json";
  if (target == "hardware") return "hardware/fuzz.json";
  if (target == "calibration") return "hardware/calibration/fuzz.json";
  if (target == "scenario" || target == "simulate") return "scenarios/fuzz/fuzz.json";
  return "fuzz.json";
}

}  // namespace

const std::vector<std::string_view>& target_names() {
  static const std::vector<std::string_view> names{"model", "hardware", "scenario", "calibration",
                                                   "graph", "trace", "simulate"};
  return names;
}

void run_target(std::string_view name, std::string_view bytes) {
  const InputText input{posed_name(name), std::string(bytes), true};
  try {
    if (name == "model") {
      (void)load_model(input);
    } else if (name == "hardware") {
      (void)load_hardware(input);
    } else if (name == "scenario") {
      (void)load_scenario(input);
    } else if (name == "calibration") {
      (void)load_calibration(input);
    } else if (name == "graph") {
      (void)import_graph_json(input.text, input.name);
    } else if (name == "trace") {
      const bool gz = bytes.size() >= 2 && bytes[0] == '\x1f' && bytes[1] == '\x8b';
      (void)parse_kineto_trace(gz ? gunzip(input.text, input.name) : input.text, input.name);
    } else if (name == "simulate") {
      simulate_first_events(input);
    } else {
      throw std::invalid_argument("no fuzz target named '" + std::string(name) + "'");
    }
  } catch (const InputError&) {
  }
}

}  // namespace moesim::fuzz
