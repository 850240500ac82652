// SPDX-License-Identifier: MIT
// The slowest device of a job. Parts of one model differ in the clock they hold at their power
// limit, so their compute-bound kernels run at slightly different speeds, persistently per chip
// (hardware's device.speed_spread: the relative standard deviation across parts). A synchronous job
// runs at the pace of its slowest device: every collective and every pipeline hand-off waits for
// it. With the speeds normal around the file's efficiencies (a typical part), the slowest of n runs
// 1 + spread x E[max of n standard normals] slower; the faster ones wait and change nothing, so one
// rank at that speed stands for the spread (docs/modelling.md, "Device speed spread").
#pragma once

#include <cstdint>
#include <vector>

#include "scenario/scenario_spec.hpp"

namespace moesim {

// E[max of n independent standard normal draws] (0 for n = 1), by quadrature of
// x n phi(x) Phi(x)^(n-1) (relative error below 1e-9 for n up to 10^7).
double expected_max_standard_normal(int64_t n);

// Per-rank factors on the time of compute-bound kernels (the SM clock's share of each op): the last
// rank (under the default placement, in the last pipeline stage, with the head and the loss) at the
// expected slowest device's, every other rank at 1; empty when the hardware has no spread or the
// job has one device.
std::vector<double> rank_compute_slowdowns(const Scenario& scenario);

}  // namespace moesim
