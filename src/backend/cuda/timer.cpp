// SPDX-License-Identifier: MIT
#include "backend/cuda/timer.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/cuda/check.hpp"

namespace moesim::cuda {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Timing summarize(std::vector<double> seconds) {
  Timing t;
  if (seconds.empty()) return t;
  std::sort(seconds.begin(), seconds.end());
  t.median_s = median_of(seconds);
  t.min_s = seconds.front();
  t.max_s = seconds.back();
  t.repeats = static_cast<int>(seconds.size());
  return t;
}

EventPool::EventPool(size_t num_events) : events_(num_events, nullptr) {
  if (events_.empty()) return;
  MOESIM_CUDA_CHECK(cudaGetDevice(&device_));
  try {
    for (auto& e : events_) MOESIM_CUDA_CHECK(cudaEventCreate(&e));
  } catch (...) {
    release();
    throw;
  }
}

EventPool::~EventPool() { release(); }

EventPool::EventPool(EventPool&& other) noexcept
    : events_(std::exchange(other.events_, {})), device_(std::exchange(other.device_, -1)) {}

EventPool& EventPool::operator=(EventPool&& other) noexcept {
  if (this != &other) {
    release();
    events_ = std::exchange(other.events_, {});
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void EventPool::release() noexcept {
  if (events_.empty()) return;
  int current = -1;
  const bool switch_device = cudaGetDevice(&current) == cudaSuccess && current != device_ && device_ >= 0;
  if (switch_device) (void)cudaSetDevice(device_);
  for (cudaEvent_t e : events_) {
    if (e) (void)cudaEventDestroy(e);
  }
  events_.clear();
  if (switch_device) (void)cudaSetDevice(current);
}

void EventPool::record(size_t i, cudaStream_t stream) const { MOESIM_CUDA_CHECK(cudaEventRecord(events_.at(i), stream)); }

double EventPool::seconds_between(size_t from, size_t to) const {
  float ms = 0;
  MOESIM_CUDA_CHECK(cudaEventElapsedTime(&ms, events_.at(from), events_.at(to)));
  return static_cast<double>(ms) * 1e-3;
}

int64_t EventPool::picoseconds_between(size_t from, size_t to) const {
  float ms = 0;
  MOESIM_CUDA_CHECK(cudaEventElapsedTime(&ms, events_.at(from), events_.at(to)));
  return static_cast<int64_t>(std::llround(static_cast<double>(ms) * 1e9));
}

std::vector<double> time_repeats(std::span<const DeviceStream> streams, int warmup, int repeats,
                                 const std::function<void(int)>& enqueue, const std::function<void()>& after_warmup,
                                 const std::function<void()>& between) {
  if (streams.empty() || repeats < 1) throw BackendError("time_repeats: at least one stream and one repeat");
  const auto num_repeats = static_cast<size_t>(repeats);
  const auto synchronize = [&] {
    for (const DeviceStream& s : streams) {
      MOESIM_CUDA_CHECK(cudaSetDevice(s.device));
      MOESIM_CUDA_CHECK(cudaStreamSynchronize(s.stream));
    }
  };
  // Events on each stream's device, created before any work so that creating them is not timed.
  std::vector<EventPool> events;
  events.reserve(streams.size());
  for (const DeviceStream& s : streams) {
    MOESIM_CUDA_CHECK(cudaSetDevice(s.device));
    events.emplace_back(2 * num_repeats);
  }
  MOESIM_CUDA_CHECK(cudaSetDevice(streams.front().device));
  for (int i = 0; i < warmup; ++i) {
    enqueue(i);
    if (between) between();
  }
  if (after_warmup) {
    synchronize();
    after_warmup();
  }
  for (size_t i = 0; i < num_repeats; ++i) {
    for (size_t s = 0; s < streams.size(); ++s) {
      MOESIM_CUDA_CHECK(cudaSetDevice(streams[s].device));
      events[s].record(2 * i, streams[s].stream);
    }
    MOESIM_CUDA_CHECK(cudaSetDevice(streams.front().device));
    enqueue(warmup + static_cast<int>(i));
    for (size_t s = 0; s < streams.size(); ++s) {
      MOESIM_CUDA_CHECK(cudaSetDevice(streams[s].device));
      events[s].record(2 * i + 1, streams[s].stream);
    }
    MOESIM_CUDA_CHECK(cudaSetDevice(streams.front().device));
    if (between) between();
  }
  synchronize();
  std::vector<double> seconds(num_repeats, 0.0);
  for (size_t s = 0; s < streams.size(); ++s) {
    MOESIM_CUDA_CHECK(cudaSetDevice(streams[s].device));
    for (size_t i = 0; i < num_repeats; ++i) seconds[i] = std::max(seconds[i], events[s].seconds_between(2 * i, 2 * i + 1));
  }
  MOESIM_CUDA_CHECK(cudaSetDevice(streams.front().device));
  return seconds;
}

Timing time_on_stream(cudaStream_t stream, int warmup, int repeats, const std::function<void(int)>& enqueue,
                      const std::function<void()>& between) {
  int device = 0;
  MOESIM_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceStream one{device, stream};
  return summarize(time_repeats(std::span(&one, 1), warmup, repeats, enqueue, {}, between));
}

}  // namespace moesim::cuda
