// SPDX-License-Identifier: MIT
// One op of a step graph timed through the executor's own launch (launch_op), as calibrate's
// attention and loss tables measure their kinds: a dry launch sizes the op's operands, buffers of
// that size are filled with uniform random values, then the live launch is timed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/cuda/op_kernels.hpp"
#include "backend/cuda/timer.hpp"
#include "graph/step_graph.hpp"

namespace moesim::cuda {

struct LaunchTiming {
  Timing timing;
  size_t operand_bytes = 0;  // what the dry launch drew from its input and output arenas
};

// `live` says what the live launch reads besides its arenas (graph, model, rank, stream, GEMM
// handle, index tables); the dry launch gets its graph, model and rank only. `seed` and seed + 1
// fill the input and output buffers.
LaunchTiming time_launch(const OpEnv& live, const Program& p, uint32_t op, uint64_t seed, int warmup, int repeats);

// Ops of a step graph to time (a case of the attention and loss benchmarks): the scenario that
// owns the model the launches read (OpEnv::model), its graph, rank 0's program and its ops.
struct GraphOps {
  std::unique_ptr<Scenario> scenario;
  StepGraph graph;
  size_t program = 0;
  std::vector<uint32_t> ops;
};

// What a benchmark of graph ops (the attention and loss tables) takes from its caller.
struct OpBenchOptions {
  cudaStream_t stream = nullptr;
  bool quick = false;                           // fewer repeats
  std::function<void(const std::string&)> log;  // a line per op timed; may be empty
  std::function<void()> measured;               // after each op timed; may be empty
};

// printf of up to five numbers into a string: the calibrate benchmarks' log and summary lines.
std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0, double e = 0);

// A table of the calibration file (docs/calibration/format.md): {"measure", "value", "points"},
// one point per measure x, the median of the values measured there.
nlohmann::json calibration_table(const std::string& measure, const std::string& value,
                                 const std::map<double, std::vector<double>>& by_x);

}  // namespace moesim::cuda
