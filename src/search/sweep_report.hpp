// SPDX-License-Identifier: MIT
// A sweep's report: text for people, JSON for machines, CSV rows (one per configuration, in
// index order) for notebooks. Everything here is a pure function of the outcomes, so it is
// byte-identical whatever the number of threads or processes; only wall_s (and the rate derived
// from it) changes from run to run, and the text report keeps it on one line starting "wall".
#pragma once

#include <string>

#include "search/sweep.hpp"

namespace moesim {

struct SweepRunInfo {
  double wall_s = 0;
  int64_t threads = 1;
  int64_t processes = 1;
};

std::string sweep_report_text(const SweepSpace& space, const SweepSummary& summary, const SweepRunInfo& info);
std::string sweep_report_json(const SweepSpace& space, const SweepSummary& summary, const SweepRunInfo& info);

std::string sweep_csv_header(const SweepSpace& space);
std::string sweep_csv_row(const SweepSpace& space, const ConfigOutcome& outcome);

// "parallel/fsdp/shard" -> "fsdp.shard": how tables name an axis.
std::string axis_short_name(const std::string& path);
// "ep=64 recompute.policy=full ...": a configuration in one line.
std::string config_text(const SweepSpace& space, int64_t index);

}  // namespace moesim
