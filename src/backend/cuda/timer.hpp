// SPDX-License-Identifier: MIT
// The CUDA backend's one way of timing GPU work, with CUDA events. Every measurement (calibration,
// GEMM autotuning, attention benchmarks, collectives, the executor's per-op timeline) goes
// through here, so they share one convention:
//   - `warmup` untimed calls first (plans, caches, clocks settle), then `repeats` timed calls;
//   - each timed call sits between its own pair of events on its stream, recorded back to back
//     (the host runs ahead; nothing synchronises between repeats), so a repeat's time is GPU time
//     from the start event to the end event, without host launch gaps between repeats;
//   - over several streams (one per GPU of a collective) a repeat's time is the slowest stream's;
//   - what is reported is the median of the repeats (the mean of the two middle values for an
//     even count), robust to the odd clock or scheduling hiccup; min and max come along.
// CUDA event resolution is about 0.5 us: a single call much shorter than that is noise alone.
// Throws BackendError (check.hpp) on a CUDA error.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <cuda_runtime.h>

namespace moesim::cuda {

struct Timing {
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  int repeats = 0;
};

// The median convention above, over any list of values (0 for an empty list); calibration's
// tables take the median of several rates by it too.
double median_of(std::vector<double> values);
// Median, min and max of repeats' seconds (an empty list gives all zeros).
Timing summarize(std::vector<double> seconds);

// CUDA events owned together: created on the device current at construction, destroyed with the
// pool (on that device), so that no path - a throw included - leaks them.
class EventPool {
 public:
  EventPool() = default;  // no events, no CUDA call
  explicit EventPool(size_t num_events);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  EventPool(EventPool&& other) noexcept;
  EventPool& operator=(EventPool&& other) noexcept;

  size_t size() const { return events_.size(); }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }
  void record(size_t i, cudaStream_t stream) const;
  // GPU time from event `from` to event `to`, both recorded and complete.
  double seconds_between(size_t from, size_t to) const;
  // The same in integer picoseconds (the simulator's Picoseconds), rounded to nearest.
  int64_t picoseconds_between(size_t from, size_t to) const;

 private:
  void release() noexcept;
  std::vector<cudaEvent_t> events_;
  int device_ = -1;
};

// A stream and the device it belongs to (events are recorded on the stream's own device).
struct DeviceStream {
  int device = 0;
  cudaStream_t stream = nullptr;
};

// The raw form: per repeat, the slowest stream's seconds. `enqueue(i)` issues call i's work on
// every stream (i = 0 .. warmup + repeats - 1 counts every call, warm-ups first, so that callers
// can rotate inputs beyond the L2 cache). When `after_warmup` is given, the streams are
// synchronised after the warm-up calls and it runs before the first timed call (a barrier across
// processes, so that every member starts its repeats together). Leaves the first stream's device
// current.
// `between`, when given, is enqueued after every call (warm-ups too), outside its events: work the
// repeats are not timed over, e.g. an idle gap that keeps a sweep's power draw like a training
// step's (calibrate's GEMM duty cycle).
std::vector<double> time_repeats(std::span<const DeviceStream> streams, int warmup, int repeats,
                                 const std::function<void(int)>& enqueue,
                                 const std::function<void()>& after_warmup = {},
                                 const std::function<void()>& between = {});

// The common case: one stream on the current device, summarised.
Timing time_on_stream(cudaStream_t stream, int warmup, int repeats, const std::function<void(int)>& enqueue,
                      const std::function<void()>& between = {});

}  // namespace moesim::cuda
