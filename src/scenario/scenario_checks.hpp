// SPDX-License-Identifier: MIT
// The plan's consistency checks: a scenario against the model and hardware it names.
#pragma once

#include "scenario/scenario_spec.hpp"

namespace moesim {

// Throws InputError naming the scenario file and the JSON path of the first inconsistency.
void check_scenario(const Scenario& scenario);

// Whether `model` has the projection a LoRA target names (a slice drops the targets it lost).
bool lora_target_exists(const ModelSpec& model, LoraTarget target);

}  // namespace moesim
