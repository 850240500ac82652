// SPDX-License-Identifier: MIT
// The backend's one timer (timer.hpp) against work of known length: host functions that sleep a
// set time on the stream, so that the event pair around a repeat must enclose the sleep. Checks
// the median convention, the call order (warm-ups first, counted), the hook after the warm-ups,
// and that over several streams a repeat takes the slowest stream's time.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/timer.hpp"

using namespace moesim::cuda;

namespace {

void sleep_host(void* microseconds) {
  std::this_thread::sleep_for(std::chrono::microseconds(*static_cast<const int*>(microseconds)));
}

// Enqueues a host sleep of `us` microseconds on `stream`: the stream does nothing else meanwhile.
void enqueue_sleep(cudaStream_t stream, int& us) { MOESIM_CUDA_CHECK(cudaLaunchHostFunc(stream, sleep_host, &us)); }

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { MOESIM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s); }
};

}  // namespace

TEST_CASE("summarize: the median (mean of the middle two for an even count), min and max") {
  const Timing odd = summarize({5.0, 1.0, 3.0});
  CHECK(odd.median_s == 3.0);
  CHECK(odd.min_s == 1.0);
  CHECK(odd.max_s == 5.0);
  CHECK(odd.repeats == 3);
  CHECK(summarize({4.0, 1.0, 2.0, 3.0}).median_s == 2.5);
  CHECK(summarize({}).repeats == 0);
  CHECK(median_of({7.0}) == 7.0);
  CHECK(median_of({}) == 0.0);
}

TEST_CASE("time_on_stream encloses the work of each repeat and calls warm-ups first") {
  Stream stream;
  int sleep_us = 2000;
  std::vector<int> calls;
  const Timing t = time_on_stream(stream.s, 2, 5, [&](int i) {
    calls.push_back(i);
    enqueue_sleep(stream.s, sleep_us);
  });
  CHECK(calls == std::vector<int>{0, 1, 2, 3, 4, 5, 6});
  CHECK(t.repeats == 5);
  // Each repeat's events enclose a 2 ms sleep; the host function's hand-offs add tens of
  // microseconds, not milliseconds.
  CHECK(t.min_s >= 2e-3);
  CHECK(t.median_s < 2e-3 + 1e-3);
}

TEST_CASE("time_repeats: the slowest stream's time per repeat, and the hook between warm-ups and repeats") {
  Stream fast, slow;
  int device = 0;
  MOESIM_CUDA_CHECK(cudaGetDevice(&device));
  const std::vector<DeviceStream> streams = {{device, fast.s}, {device, slow.s}};
  int fast_us = 500, slow_us = 3000;
  int hook_calls = 0;
  int calls_before_hook = -1;
  int calls = 0;
  const std::vector<double> seconds = time_repeats(
      streams, 1, 3,
      [&](int) {
        ++calls;
        enqueue_sleep(fast.s, fast_us);
        enqueue_sleep(slow.s, slow_us);
      },
      [&] {
        ++hook_calls;
        calls_before_hook = calls;
      });
  CHECK(hook_calls == 1);
  CHECK(calls_before_hook == 1);  // after the one warm-up, before any timed call
  REQUIRE(seconds.size() == 3);
  for (const double s : seconds) {
    CHECK(s >= 3e-3);
    CHECK(s < 3e-3 + 1e-3);
  }
}

TEST_CASE("idle_gpu holds its stream for its time; `between` runs after every call, outside its events") {
  Stream stream;
  const Timing idle = time_on_stream(stream.s, 1, 5, [&](int) { idle_gpu(300e-6, stream.s); });
  CHECK(idle.min_s >= 300e-6);
  CHECK(idle.median_s < 300e-6 + 100e-6);
  int between = 0;
  const auto start = std::chrono::steady_clock::now();
  const Timing t = time_on_stream(
      stream.s, 2, 5, [&](int) { idle_gpu(100e-6, stream.s); },
      [&] {
        ++between;
        idle_gpu(2e-3, stream.s);
      });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(between == 7);  // after each warm-up and each timed call
  CHECK(t.min_s >= 100e-6);
  CHECK(t.median_s < 100e-6 + 100e-6);  // the 2 ms gaps are not inside any repeat
  CHECK(wall >= 7 * 2e-3);              // but they ran
}

TEST_CASE("EventPool: picoseconds and seconds between two events agree") {
  Stream stream;
  EventPool events(2);
  int sleep_us = 1000;
  events.record(0, stream.s);
  enqueue_sleep(stream.s, sleep_us);
  events.record(1, stream.s);
  MOESIM_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  const double s = events.seconds_between(0, 1);
  CHECK(s >= 1e-3);
  CHECK(static_cast<double>(events.picoseconds_between(0, 1)) == doctest::Approx(s * 1e12).epsilon(1e-6));
}
