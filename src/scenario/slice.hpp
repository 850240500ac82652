// SPDX-License-Identifier: MIT
// A slice of a scenario small enough to run on the GPUs at hand (`moesim slice`): 1-2 layers of
// its model at the per-rank shapes of its plan, as scenarios/calibration/ was made by hand.
//
// The construction (docs/calibration/guide.md, "Slices of your own model"):
//   layers   the model's most frequent (attention, FFN) layer kinds, up to `num_layers` of them,
//            in the order they first appear (K3: KDA + MoE, then MLA+DSA + MoE; its single dense
//            first layer is left out); with fewer kinds than layers the kinds repeat
//   experts  the routed experts one EP rank of the plan holds, times the slice's EP degree (the
//            slice's devices when the plan has EP, else 1), top-k capped at that count: each
//            slice device then holds the plan's experts per rank, and with top-k kept the
//            grouped GEMMs see the plan's rows per expert (K3 EP64 over 2 devices: 28 experts,
//            9,362 rows per expert, as on an EP64 rank)
//   TP       heads, FFN widths and the vocabulary divided by the plan's TP degree (the routed
//            experts' width by the expert TP degree): a TP rank's matrix shapes, run without TP
//            (its collectives are not in the slice)
//   plan     FSDP over the slice's devices, EP as above, no TP, CP or PP; each device runs the
//            plan's micro-batch and sequence and as many micro-batches per step as a plan's
//            data-parallel rank does; recipe, recompute, swap, loss, routing and fused ops kept
//   dropped  the vision tower, sweep axes, stragglers; layer sets of recompute and swap become
//            "all"; a routing histogram (of the full model's experts) becomes uniform
// Context parallelism is refused (a CP rank's attention is not a smaller attention).
#pragma once

#include <cstdint>
#include <string>

#include "scenario/scenario_spec.hpp"

namespace moesim {

struct SliceOptions {
  int64_t num_layers = 2;
  int64_t num_devices = 1;
  std::string model_ref;     // how the sliced scenario names its model file ("x.model.json")
  std::string hardware_ref;  // how it names its hardware: a path or a shipped name
};

struct SliceFiles {
  std::string scenario_json;
  std::string model_json;
  std::string summary;  // what was derived, in a few lines for the terminal
};

// `source` is the loaded scenario, `scenario_text` / `model_text` the files it was read from.
// Throws InputError naming `source.file` for a plan that cannot be sliced, and naming the flag
// for bad options.
SliceFiles make_slice(const Scenario& source, const InputText& scenario_text, const InputText& model_text,
                      const SliceOptions& options);

}  // namespace moesim
