// SPDX-License-Identifier: MIT
// Pipeline schedules: the order in which one pipeline stage runs the forward, backward and
// weight-gradient passes of its model chunks over a step's micro-batches. The graph builder emits
// a stage's ops in this order; tests replay it against closed forms.
#pragma once

#include <cstdint>
#include <vector>

namespace moesim {

// One pass of one model chunk of one micro-batch: its forward, its backward, or (zero-bubble
// schedules) the weight gradients held back from an earlier backward.
enum class Pass { forward, backward, weight };

struct Action {
  Pass pass;
  int64_t micro;  // -1 for a weight pass: it takes the oldest held-back backward
  int64_t chunk;  // model chunk on this stage: the virtual chunk, or DualPipe's direction
  bool defer_weights = false;  // backward: hold its weight gradients back for a weight pass
  bool overlapped = false;     // forward: interleaved op by op with the backward that follows
};

// 1F1B (chunks 1), interleaved 1F1B (chunks > 1; micros a multiple of stages) and ZB-H1
// (zero_bubble, chunks 1) for `stage` of `stages`.
std::vector<Action> pipeline_schedule(int64_t stage, int64_t stages, int64_t chunks, int64_t micros, bool zero_bubble);

// DualPipe for `rank` of `stages` (even) over `micros` micro-batches (even, >= 2 stages): chunk 0
// is the rank's stage for the micro-batches entering at rank 0 (micro-batches 0 .. micros/2 - 1),
// chunk 1 its mirror stage stages-1-rank for those entering at rank stages-1 (the rest).
// `overlap`: the steady state's forward/backward pairs are marked overlapped.
std::vector<Action> dualpipe_schedule(int64_t rank, int64_t stages, int64_t micros, bool overlap);

}  // namespace moesim
