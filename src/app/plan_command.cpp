// SPDX-License-Identifier: MIT
#include "app/plan_command.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "app/progress.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "search/capacity.hpp"

namespace moesim {
namespace {

// A number flag: finite, positive and at most `max` (CLI11's checks let NaN through).
void check_number_flag(const char* flag, double v, double max) {
  if (!(std::isfinite(v) && v > 0 && v <= max)) {
    char shown[64];
    std::snprintf(shown, sizeof shown, "%g", v);
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", max);
    throw InputError(flag, "", std::string("must be a positive number of at most ") + limit + ", got " + shown);
  }
}

}  // namespace

PlanCommands add_plan_command(CLI::App& app, PlanCliOptions& opt) {
  auto* plan = app.add_subcommand("plan", "Capacity planning: devices for a token budget and deadline; what fits")
                   ->require_subcommand(1);
  PlanCommands c;
  c.devices = plan->add_subcommand("devices",
                                   "Fewest devices (and nodes, supernodes) and the best plan to train TOKENS in DAYS");
  c.devices->add_option("SCENARIO", opt.scenario, "Scenario file or shipped name: model, hardware, recipe, tp/pp/cp/ep")
      ->required();
  c.devices->add_option("--tokens", opt.tokens, "Training tokens, e.g. 1e12")->required()->check(CLI::PositiveNumber);
  c.devices->add_option("--days", opt.days, "Deadline in days")->required()->check(CLI::PositiveNumber);
  c.devices
      ->add_option("--max-devices", opt.max_devices, "Largest device count tried (default: the hardware's, else 16384)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  c.devices->add_flag("--fixed-batch", opt.fixed_batch,
                      "Keep the scenario's global batch instead of growing it with data parallelism");
  c.devices->add_flag("--json", opt.json, "JSON output");
  c.devices->add_flag("--all-ranks", opt.all_ranks, "Simulate every rank instead of one per class of identical ranks");

  c.fit = plan->add_subcommand("fit", "The largest sequence length or micro-batch that fits the scenario's plan");
  c.fit->add_option("SCENARIO", opt.scenario, "Scenario file or shipped name")->required();
  c.fit->add_option("--vary", opt.vary, "What to grow: sequence_length or micro_batch_size")
      ->check(CLI::IsMember({"sequence_length", "micro_batch_size"}));
  c.fit->add_option("--step", opt.granularity, "Granularity (default: 1024 tokens x cp [x tp with SP], or 1 sequence)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  c.fit->add_option("--max", opt.max_value, "Largest value tried (default: 4194304 tokens or 4096 sequences)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  c.fit->add_flag("--json", opt.json, "JSON output");
  c.fit->add_flag("--all-ranks", opt.all_ranks, "Simulate every rank instead of one per class of identical ranks");
  return c;
}

void run_plan_command(const PlanCommands& c, const PlanCliOptions& opt) {
  // The flags first: a bad one is named before the scenario is read.
  if (c.devices->parsed()) {
    check_number_flag("--tokens", opt.tokens, limits::kMaxPlanTokens);
    check_number_flag("--days", opt.days, limits::kMaxPlanDays);
  }
  const SweepSpace space(read_input(opt.scenario, "scenarios", "SCENARIO"));
  // A progress line on a terminal (progress.hpp): plans evaluated so far; a search has no total.
  const bool show_progress = progress_wanted(opt.json);
  const auto start = std::chrono::steady_clock::now();
  const auto progress = [&](int64_t n) { draw_count(n, "plans evaluated", start); };
  std::string text;
  if (c.devices->parsed()) {
    DevicePlanOptions o;
    o.tokens = opt.tokens;
    o.days = opt.days;
    o.max_devices = opt.max_devices;
    o.fixed_batch = opt.fixed_batch;
    o.distinct_ranks = !opt.all_ranks;
    if (show_progress) o.progress = progress;
    const DevicePlanResult r = plan_devices(space, o);
    if (show_progress) end_progress();
    text = opt.json ? device_plan_json(space, o, r) : device_plan_text(space, o, r);
  } else {
    FitOptions o;
    o.vary = opt.vary == "micro_batch_size" ? FitVariable::micro_batch_size : FitVariable::sequence_length;
    o.granularity = opt.granularity;
    o.max_value = opt.max_value;
    o.distinct_ranks = !opt.all_ranks;
    if (show_progress) o.progress = progress;
    const FitResult r = plan_fit(space, o);
    if (show_progress) end_progress();
    text = opt.json ? fit_json(space, r) : fit_text(space, r);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace moesim
