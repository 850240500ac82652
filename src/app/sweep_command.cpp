// SPDX-License-Identifier: MIT
#include "app/sweep_command.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <csignal>

#include "app/progress.hpp"
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

// Ctrl-C during a sweep: the workers stop after the configuration each is on, the CSV keeps the
// rows of every configuration before the first unfinished one, and the command exits 130 (128 +
// SIGINT, as a shell reports it). The handler is reset by its first run, so a second Ctrl-C ends
// the process at once.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
extern "C" void on_interrupt(int) { interrupted.store(true); }

class InterruptHandler {
 public:
  InterruptHandler() {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    installed_ = ::sigaction(SIGINT, &sa, &previous_) == 0;
  }
  ~InterruptHandler() {
    if (installed_) ::sigaction(SIGINT, &previous_, nullptr);
  }
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

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
    // Under MPI every process would have to stop at the same round: there Ctrl-C ends the job.
    std::optional<InterruptHandler> on_ctrl_c;
    if (dist->size() == 1) on_ctrl_c.emplace();
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
    const bool show_progress = root && progress_wanted(opt.json);
    if (show_progress) {
      run.progress = [&](int64_t done, int64_t total) { draw_progress(done, total, "configurations", start); };
    }
    if (on_ctrl_c) run.stop = &interrupted;
    const int64_t num_done = run_sweep(space, run, *dist);
    if (show_progress) end_progress();
    if (!root) return 0;
    if (csv) csv->commit();
    if (num_done < space.num_configs()) {
      std::string done = std::to_string(num_done) + " of " + std::to_string(space.num_configs()) + " configurations";
      if (num_done > 0) done += " (0 to " + std::to_string(num_done - 1) + ")";
      if (csv) done += "; the CSV '" + opt.csv + "' holds their rows, complete";
      std::cerr << "moesim sweep: interrupted after " << done << "\n";
      return 130;
    }
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
