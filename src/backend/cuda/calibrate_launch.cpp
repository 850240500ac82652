// SPDX-License-Identifier: MIT
#include "backend/cuda/calibrate_launch.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/kernels.hpp"

namespace moesim::cuda {

LaunchTiming time_launch(const OpEnv& live, const Program& p, uint32_t op, uint64_t seed, int warmup, int repeats) {
  Arena dry_in, dry_out;
  OpEnv env;
  env.graph = live.graph;
  env.model = live.model;
  env.rank = live.rank;
  env.dry = true;
  env.in = &dry_in;
  env.out = &dry_out;
  launch_op(env, p, op);
  DeviceBuffer<bf16_bits> in_buf(dry_in.high_water() / 2 + 128), out_buf(dry_out.high_water() / 2 + 128);
  fill_uniform(in_buf.data(), static_cast<int64_t>(in_buf.size()), seed, -1.0f, 1.0f, live.stream);
  fill_uniform(out_buf.data(), static_cast<int64_t>(out_buf.size()), seed + 1, -1.0f, 1.0f, live.stream);
  Arena in(in_buf.data(), in_buf.bytes()), out(out_buf.data(), out_buf.bytes());
  env = live;
  env.dry = false;
  env.in = &in;
  env.out = &out;
  LaunchTiming t;
  t.timing = time_on_stream(live.stream, warmup, repeats, [&](int) { launch_op(env, p, op); });
  t.operand_bytes = dry_in.high_water() + dry_out.high_water();
  return t;
}

std::string fmt(const char* format, double a, double b, double c, double d, double e) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, a, b, c, d, e);
  return buf;
}

nlohmann::json calibration_table(const std::string& measure, const std::string& value,
                                 const std::map<double, std::vector<double>>& by_x) {
  // Several samples may share a measure (GEMMs of one min(m, n, k)): the table keeps their median.
  nlohmann::json points = nlohmann::json::array();
  for (const auto& [x, ys] : by_x) points.push_back({x, median_of(ys)});
  return {{"measure", measure}, {"value", value}, {"points", points}};
}

}  // namespace moesim::cuda
