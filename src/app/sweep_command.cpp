// SPDX-License-Identifier: MIT
#include "app/sweep_command.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include "core/error.hpp"
#include "search/distributed.hpp"
#include "search/streamed_file.hpp"
#include "search/sweep_report.hpp"

namespace moesim {

CLI::App* add_sweep_command(CLI::App& app, SweepCliOptions& opt) {
  auto* cmd =
      app.add_subcommand("sweep", "Strategy search over the scenario's sweep axes: rank, Pareto front, CSV/JSON");
  cmd->add_option("SCENARIO", opt.scenario, "Scenario file with sweep axes, or a shipped scenario name")->required();
  cmd->add_flag("--json", opt.json, "JSON output");
  cmd->add_option("--csv", opt.csv, "Write one row per configuration (index order) to this file");
  cmd->add_option("--top", opt.top, "Configurations listed, best first")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  cmd->add_option("--threads", opt.threads, "Worker threads (default: the machine's hardware threads)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_option("--list-rejected", opt.max_listed, "Rejected and pruned configurations listed with their reason")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  cmd->add_flag("--all-ranks", opt.all_ranks, "Simulate every rank instead of one per class of identical ranks");
  cmd->add_option("--explain", opt.explain,
                  "Print the full step report (as `simulate` does; --json for JSON) of configuration INDEX")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  return cmd;
}

namespace {

// "[=====>     ] 1,234 / 6,912" on one terminal line, redrawn in place.
void draw_progress(int64_t done, int64_t total, std::chrono::steady_clock::time_point start) {
  constexpr int kWidth = 40;
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The estimate assumes the rest goes at the average rate so far (rejected configurations are
  // cheap and spread over the space, so it wanders a little).
  char eta[32] = "";
  if (done > 0 && done < total) {
    std::snprintf(eta, sizeof eta, ", ~%.0f s left", s * static_cast<double>(total - done) / static_cast<double>(done));
  }
  std::fprintf(stderr, "\r[%s] %lld / %lld configurations, %.0f s%s   ", bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total), s, eta);
  std::fflush(stderr);
}

}  // namespace

int run_sweep_command(const SweepCliOptions& opt) {
  std::unique_ptr<Distributed> dist = start_distributed();
  try {
    const auto start = std::chrono::steady_clock::now();
    const SweepSpace space(read_input(opt.scenario, "scenarios", "SCENARIO"));
    if (space.num_axes() == 0) {
      throw InputError(space.base().file, "/sweep/axes", "the scenario declares no sweep axes (see docs/sweep.md)");
    }
    if (opt.explain >= 0) {
      if (opt.explain >= space.num_configs()) {
        throw InputError("--explain", "", "the sweep has configurations 0 to " + std::to_string(space.num_configs() - 1) +
                                              ", got " + std::to_string(opt.explain));
      }
      if (dist->rank() != 0) return 0;
      ConfigEvaluator evaluator(space, !opt.all_ranks);
      const StepReport report = evaluator.explain(opt.explain);
      const std::string text = opt.json ? step_report_json(report) : step_report_text(report);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    }
    const bool root = dist->rank() == 0;
    std::optional<StreamedFile> csv;
    if (root && !opt.csv.empty()) {
      csv.emplace(opt.csv, "--csv");
      csv->write(sweep_csv_header(space));
    }
    SweepSummary summary(opt.top, opt.max_listed);
    SweepRunOptions run;
    run.threads = opt.threads > 0 ? opt.threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
    run.distinct_ranks = !opt.all_ranks;
    run.consume = [&](const ConfigOutcome& o) {
      summary.add(o);
      if (csv) csv->write(sweep_csv_row(space, o));
    };
    const bool show_progress = root && ::isatty(STDERR_FILENO) != 0;
    if (show_progress) run.progress = [&](int64_t done, int64_t total) { draw_progress(done, total, start); };
    run_sweep(space, run, *dist);
    if (show_progress) std::fprintf(stderr, "\n");
    if (!root) return 0;
    if (csv) csv->commit();
    SweepRunInfo info;
    info.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    info.threads = run.threads;
    info.processes = dist->size();
    const std::string text =
        opt.json ? sweep_report_json(space, summary, info) : sweep_report_text(space, summary, info);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const InputError& e) {
    if (dist->size() == 1) throw;
    // Every process reads the same input, so each reports it; rank 0 speaks for the job.
    if (dist->rank() == 0) std::cerr << e.what() << "\n";
    dist->abort(2);
  } catch (const std::exception& e) {
    if (dist->size() == 1) throw;
    std::cerr << "moesim: internal error on MPI rank " << dist->rank() << ": " << e.what() << "\n";
    dist->abort(1);
  }
  return 1;  // not reached: abort() ends the job
}

}  // namespace moesim
