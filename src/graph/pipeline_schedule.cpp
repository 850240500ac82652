// SPDX-License-Identifier: MIT
#include "graph/pipeline_schedule.hpp"

#include <algorithm>
#include <array>

namespace moesim {

// Megatron's 1F1B and interleaved 1F1B orders for one stage, and ZB-H1 (Qi et al., "Zero Bubble
// Pipeline Parallelism", ICLR 2024, arXiv 2401.10241): 1F1B's order of forwards and input-gradient
// backwards, with stage s running each micro-batch's weight gradients s backwards later (the last
// ones after the last backward). Later stages return input gradients sooner; every stage holds
// about p micro-batches of activations, as in 1F1B.
//
// Interleaved: Megatron-Core's schedule table. Micro-batches go in groups of `stages`; within a
// group every micro-batch runs chunk 0, then every one chunk 1, ...; backwards take the chunks in
// reverse. Stage s warms up with 2 (stages - s - 1) + (chunks - 1) stages forwards, then
// alternates, then drains. The scenario checker asks for a micro-batch count that is a multiple
// of the stages: with a smaller last group this order deadlocks (a stage's backward would wait
// for a gradient whose forward input it has not yet sent).
std::vector<Action> pipeline_schedule(int64_t stage, int64_t stages, int64_t chunks, int64_t micros, bool zero_bubble) {
  std::vector<Action> out;
  if (chunks == 1) {
    const int64_t warmup = std::min(stages - stage - 1, micros);
    const int64_t lag = zero_bubble ? stage : -1;  // weight passes run `lag` backwards behind
    for (int64_t m = 0; m < warmup; ++m) out.push_back({Pass::forward, m, 0});
    for (int64_t b = 0; b < micros; ++b) {
      if (b + warmup < micros) out.push_back({Pass::forward, b + warmup, 0});
      out.push_back({Pass::backward, b, 0, zero_bubble});
      if (zero_bubble && b - lag >= 0) out.push_back({Pass::weight, -1, 0});
    }
    if (zero_bubble) {
      for (int64_t m = std::max<int64_t>(micros - lag, 0); m < micros; ++m) out.push_back({Pass::weight, -1, 0});
    }
    return out;
  }
  std::vector<Action> forwards, backwards;
  for (int64_t first = 0; first < micros; first += stages) {
    const int64_t last = std::min(first + stages, micros);
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t m = first; m < last; ++m) {
        forwards.push_back({Pass::forward, m, c});
        backwards.push_back({Pass::backward, m, chunks - 1 - c});
      }
    }
  }
  const auto total = static_cast<int64_t>(forwards.size());
  const int64_t warmup = std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  for (int64_t k = 0; k < warmup; ++k) out.push_back(forwards[static_cast<size_t>(k)]);
  for (int64_t k = warmup; k < total; ++k) {
    out.push_back(forwards[static_cast<size_t>(k)]);
    out.push_back(backwards[static_cast<size_t>(k - warmup)]);
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(backwards[static_cast<size_t>(k)]);
  return out;
}

// DualPipe (DeepSeek-V3 technical report, arXiv 2412.19437, section 3.2.1; the order of the
// reference implementation, github.com/deepseek-ai/DualPipe). Rank r holds model stage r for the
// micro-batches that enter at rank 0 (direction 0) and stage p-1-r for those that enter at rank
// p-1 (direction 1), half of them each. "Phase 0" is the direction in which the rank is nearer the
// entry, h = min(r, p-1-r) stages in. Eight steps: forwards of phase 0, then of both phases; then
// zero-bubble backward, weight and forward; the steady state, where each forward runs overlapped
// with a backward of the other phase; then the drain, whose later backwards hold their weight
// gradients back for the weight passes at the end (FIFO, as the reference's WeightGradStore).
std::vector<Action> dualpipe_schedule(int64_t rank, int64_t stages, int64_t micros, bool overlap) {
  const int64_t half = stages / 2;
  const int64_t h = std::min(rank, stages - 1 - rank);
  const bool middle = h == half - 1;
  const int64_t per_direction = micros / 2;
  const int64_t near = rank < half ? 0 : 1;  // the direction of phase 0
  std::array<int64_t, 2> forwards{}, backwards{};
  std::vector<Action> out;
  auto direction = [&](int phase) { return phase == 0 ? near : 1 - near; };
  auto forward = [&](int phase, bool overlapped) {
    const int64_t d = direction(phase);
    out.push_back({Pass::forward, d * per_direction + forwards[static_cast<size_t>(d)]++, d, false, overlapped});
  };
  auto backward = [&](int phase, bool defer) {
    const int64_t d = direction(phase);
    out.push_back({Pass::backward, d * per_direction + backwards[static_cast<size_t>(d)]++, d, defer, false});
  };
  auto weight = [&] { out.push_back({Pass::weight, -1, 0}); };
  auto forward_backward = [&](int forward_phase, int backward_phase) {
    forward(forward_phase, overlap);
    backward(backward_phase, false);
  };
  for (int64_t i = 0; i < (half - h - 1) * 2; ++i) forward(0, false);  // 1: F0
  for (int64_t i = 0; i < h + 1; ++i) {                                   // 2: F0 F1
    forward(0, false);
    forward(1, false);
  }
  for (int64_t i = 0; i < half - h - 1; ++i) {  // 3: B1 W F1
    backward(1, true);
    weight();
    forward(1, false);
  }
  for (int64_t i = 0; i < per_direction - stages + h + 1; ++i) {  // 4: F0&B1 F1&B0
    if (i == 0 && middle) {  // the middle ranks run their first pair apart: a smaller bubble
      forward(0, false);
      backward(1, false);
    } else {
      forward_backward(0, 1);
    }
    forward_backward(1, 0);
  }
  for (int64_t i = 0; i < half - h - 1; ++i) {  // 5: B1 F1&B0
    backward(1, false);
    forward_backward(1, 0);
  }
  bool defer = false;  // 6: B1 B0, the later half holding weight gradients back
  for (int64_t i = 0; i < h + 1; ++i) {
    if (i == (h + 1) / 2 && h % 2 == 1) defer = true;
    backward(1, defer);
    if (i == (h + 1) / 2 && h % 2 == 0) defer = true;
    backward(0, defer);
  }
  for (int64_t i = 0; i < half - h - 1; ++i) {  // 7: W B0
    weight();
    backward(0, true);
  }
  for (int64_t i = 0; i < h + 1; ++i) weight();  // 8: W
  return out;
}

}  // namespace moesim
