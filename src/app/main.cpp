// SPDX-License-Identifier: MIT
// moesim's command line. Exit codes: 0 ok, 2 bad input (a file, a JSON path or a flag), 1 internal.
// This is the only place that catches errors and the only place that writes to the terminal.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <unistd.h>

#include "app/calibrate_command.hpp"
#include "app/fusion_command.hpp"
#include "app/graph_commands.hpp"
#include "app/hardware_flag.hpp"
#include "app/input_info.hpp"
#include "app/model_info.hpp"
#include "app/plan_command.hpp"
#include "app/progress.hpp"
#include "app/run_command.hpp"
#include "app/slice_command.hpp"
#include "app/sweep_command.hpp"
#include "app/trace_commands.hpp"
#include "core/allocator.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"
#include "cost/calibration.hpp"
#include "engine/power_runs.hpp"
#include "engine/sampled_steps.hpp"
#include "graph/graph_checks.hpp"
#include "graph/graph_json.hpp"
#include "report/step_report.hpp"
#include "report/trace.hpp"
#include "scenario/device_spread.hpp"
#ifdef MOESIM_GPU_MODULE
#include <functional>
#include <memory>

#include "app/gpu_commands.hpp"  // built with -Dcuda: calibrate, run, validate, from their own module
#include "search/distributed.hpp"
#endif

namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitInternal = 1;

struct Options {
  bool json = false;
  std::string model;
  std::string hardware;
  std::string scenario;
  int64_t seq_len = 4096;
  std::string describe_kind;
  std::string output;
  std::string trace;
  std::string memory_csv;
  int64_t steps = 0;
  int64_t threads = 0;
  int64_t trace_ranks = 8;
  bool distinct_ranks = false;
  std::string graph_file;
  bool markdown = false;
  std::string hardware_override;  // --hardware
};

void print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

#ifdef MOESIM_GPU_MODULE
// The GPU commands run over the job's processes: one, or one rank of the plan each under mpirun
// (start_distributed starts MPI then, as for `moesim sweep`; only these commands and sweep do).
// Process 0 prints. Input errors are the same on every process (the same inputs, or made so by
// backend/rank_bootstrap.hpp agree_on_input) or come on process 0 after the last collective (an
// output file), so process 0 reports them and ends with exit code 2, which mpirun returns; the
// others end quietly with 0 (a non-zero exit or MPI_Abort elsewhere would let mpirun kill
// process 0 before it has said why). Any other error ends the whole job (MPI_Abort), so that none
// waits in NCCL or MPI for the process that failed.
int run_gpu_command(const std::function<std::string(moesim::Distributed&)>& command) {
  const std::unique_ptr<moesim::Distributed> job = moesim::start_distributed();
  try {
    const std::string out = command(*job);
    if (job->rank() == 0) print(out);
    return 0;
  } catch (const moesim::InputError& e) {
    if (job->size() == 1) throw;
    if (job->rank() != 0) return 0;
    std::cerr << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    if (job->size() == 1) throw;
    std::cerr << "moesim: internal error on MPI rank " << job->rank() << ": " << e.what() << "\n";
    job->abort(kExitInternal);
  }
  return kExitInternal;  // not reached: abort() ends the job
}
#endif

// The hardware's calibration file, read whole now (the cost model reads its tables later), so that
// `hardware info` and `scenario info` refuse a bad table as simulate would.
void check_calibration(const moesim::HardwareSpec& hw) {
  if (hw.calibration_input && hw.calibration_json) {
    (void)moesim::load_calibration(*hw.calibration_input, *hw.calibration_json);
  }
}

// A group command without (or with an unknown) subcommand: name the group and its subcommands, as
// CLI11 says only "A subcommand is required".
bool explain_missing_subcommand(const CLI::App& app) {
  const CLI::App* group = &app;
  std::string where;
  for (;;) {
    const auto parsed = group->get_subcommands();
    if (parsed.empty()) break;
    group = parsed.front();
    where += (where.empty() ? "" : " ") + group->get_name();
  }
  const auto all = group->get_subcommands([](const CLI::App*) { return true; });
  if (group == &app || all.empty() || group->get_require_subcommand_min() == 0) return false;
  std::string names;
  for (const CLI::App* sub : all) names += (names.empty() ? "" : ", ") + sub->get_name();
  const auto extra = group->remaining();
  std::cerr << where << ": "
            << (extra.empty() ? "a subcommand is required" : "'" + extra.front() + "' is not a subcommand")
            << " (one of: " << names << ")\n";
  return true;
}

// An exported (possibly edited) graph to simulate on scenario `s`'s machine: it must be of the
// same mesh, so that the scenario's ranks, groups and placement are the graph's.
moesim::StepGraph imported_graph_for(const std::string& file, const moesim::Scenario& s) {
  using namespace moesim;
  if (!std::filesystem::is_regular_file(file)) throw InputError("--graph", "", "no such file '" + file + "'");
  const InputText input = read_input(file, "graphs", "--graph");
  StepGraph graph = import_graph_json(input.text, input.name);
  const MeshShape& g = graph.plan.shape();
  const ParallelPlan plan = build_parallel_plan(s.spec);
  const MeshShape& want = plan.shape();
  if (!(g == want)) {
    auto str = [](const MeshShape& m) {
      return "pp " + std::to_string(m.pp) + ", replicate " + std::to_string(m.replicate) + ", shard " +
             std::to_string(m.shard) + ", cp " + std::to_string(m.cp) + ", tp " + std::to_string(m.tp) + ", ep " +
             std::to_string(m.ep) + ", etp " + std::to_string(m.etp);
    };
    throw InputError(input.name, "/mesh", "is " + str(g) + "; scenario " + s.spec.name + " plans " + str(want));
  }
  // An edited graph must still be one a step can run: the semantic checks the reader leaves out.
  if (const auto errors = check_step_graph(graph); !errors.empty()) throw InputError(input.name, "/programs", errors.front());
  return graph;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moesim;
  tune_allocator();
  CLI::App app{"moesim: simulator and performance model of trillion-parameter MoE training"};
  app.set_version_flag("--version", "moesim 0.1.0");
  app.require_subcommand(0, 1);  // at most one, so "describe scenario" reads scenario as KIND
  Options opt;

  auto* simulate = app.add_subcommand("simulate", "Simulate a training step: time, memory, breakdown");
  simulate->add_option("SCENARIO", opt.scenario, "Scenario file or shipped name (default: the embedded default)");
  simulate->add_flag("--json", opt.json, "JSON output");
  simulate->add_option("--hardware", opt.hardware_override,
                       "Hardware file or shipped name to run the scenario on, in place of the one it names");
  simulate->add_option("--trace", opt.trace, "Write a Chrome/Perfetto trace of the first sampled step");
  simulate->add_option("--trace-ranks", opt.trace_ranks, "Ranks in the trace")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  simulate->add_option("--memory-csv", opt.memory_csv, "Write rank 0's memory over time (first sampled step)");
  simulate->add_option("--steps", opt.steps, "Sampled steps (default: the scenario's routing.num_sampled_steps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  simulate->add_option("--threads", opt.threads,
                       "Worker threads for the sampled steps, one engine each (default: the machine's hardware threads; fewer "
                       "when their engines would hold more than half the memory); the results do not depend on it")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  simulate->add_option("--graph", opt.graph_file,
                       "Simulate this op graph (written by `moesim graph export`, possibly edited) instead of the "
                       "scenario's own; the scenario gives the machine and the model, and its plan must match the "
                       "graph's mesh");
  simulate->add_flag("--distinct-ranks", opt.distinct_ranks,
                     "Simulate one representative per class of interchangeable ranks (exact for equal loads; "
                     "with sampled routing each class runs its slowest member's loads)");

  auto* model_cmd = app.add_subcommand("model", "Model accounting")->require_subcommand(1);
  auto* model_info = model_cmd->add_subcommand("info", "Parameters, active parameters, weight bytes and FLOPs per token");
  model_info->add_option("MODEL", opt.model, "Model file, or a shipped model name (kimi-k3, deepseek-v3, ...)")
      ->required();
  model_info->add_option("--seq", opt.seq_len, "Sequence length for the attention FLOP terms")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  model_info->add_flag("--json", opt.json, "JSON output");

  auto* hw_cmd = app.add_subcommand("hardware", "Hardware files")->require_subcommand(1);
  auto* hw_info = hw_cmd->add_subcommand("info", "Read, check and summarise a hardware file");
  hw_info->add_option("HARDWARE", opt.hardware, "Hardware file, or a shipped hardware name")->required();
  hw_info->add_flag("--json", opt.json, "JSON output");

  auto* sc_cmd = app.add_subcommand("scenario", "Scenario files")->require_subcommand(1);
  auto* sc_info = sc_cmd->add_subcommand("info", "Read and check a scenario with its model and hardware; summarise the plan");
  sc_info->add_option("SCENARIO", opt.scenario, "Scenario file, or a shipped scenario name (default: the embedded default)");
  sc_info->add_flag("--json", opt.json, "JSON output");
  sc_info->add_option("--hardware", opt.hardware_override, "Hardware file or shipped name, in place of the scenario's");

  auto* graph_cmd = app.add_subcommand("graph", "The op graph of a training step")->require_subcommand(1);
  auto* graph_stats = graph_cmd->add_subcommand("stats", "Ops, FLOPs and bytes of one step over all ranks");
  graph_stats->add_option("SCENARIO", opt.scenario, "Scenario file or shipped name (default: the embedded default)");
  graph_stats->add_flag("--json", opt.json, "JSON output");

  auto* graph_export = graph_cmd->add_subcommand("export", "Write the op graph as JSON (docs/graph-format.md)");
  graph_export->add_option("SCENARIO", opt.scenario, "Scenario file or shipped name (default: the embedded default)");
  graph_export->add_option("-o,--output", opt.output, "Output file")->required();
  auto* graph_import = graph_cmd->add_subcommand("import", "Read an exported graph, check it, and print its stats");
  graph_import->add_option("FILE", opt.graph_file, "A file written by `moesim graph export`")->required();
  graph_import->add_flag("--json", opt.json, "JSON output");

  auto* describe = app.add_subcommand("describe", "Every input field with its type, unit, default and meaning");
  describe->add_option("KIND", opt.describe_kind, "model, hardware or scenario (default: all)")
      ->check(CLI::IsMember({"model", "hardware", "scenario"}));
  describe->add_flag("--markdown", opt.markdown, "Markdown, as docs/inputs.md");

  SweepCliOptions sweep_opt;
  auto* sweep = add_sweep_command(app, sweep_opt);
  PlanCliOptions plan_opt;
  const PlanCommands plan = add_plan_command(app, plan_opt);
  FusionCliOptions fusion_opt;
  auto* fusion = add_fusion_command(app, fusion_opt);
  SliceCliOptions slice_opt;
  auto* slice = add_slice_command(app, slice_opt);

  // calibrate and validate: from a PyTorch profiler trace in every build (trace_commands.hpp), on
  // the local GPUs in CUDA builds (gpu_commands.hpp, loaded only then).
  TraceCommand trace_opt;
  for (int i = 0; i < argc; ++i) trace_opt.command += (i ? " " : "") + std::string(argv[i]);
  std::string calibrate_out;
  auto* calibrate = app.add_subcommand(
      "calibrate", "Write a calibration file: fitted to a PyTorch profiler trace (--from-trace), or by benchmarking "
                   "kernels, copies and collectives on the local GPUs (CUDA builds)");
  calibrate->add_option("--from-trace", trace_opt.traces,
                        "PyTorch profiler trace (Kineto JSON, or .json.gz) of the training step to calibrate to; "
                        "repeat for several traces (docs/calibration/from-trace.md)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  calibrate->add_option("--scenario", trace_opt.scenarios,
                        "Scenario of the traced job (file or shipped name): one for all traces, or one per --from-trace")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  calibrate->add_option("--out", calibrate_out, "Calibration file to write (default: JSON on stdout)");
  CalibrateCommand calibrate_opt;
  calibrate_opt.command = trace_opt.command;
  std::string calibrate_only;
  std::optional<int64_t> calibrate_devices;
  calibrate->add_flag("--quick", calibrate_opt.quick, "A coarse grid and few repeats (a smoke test; GPU calibration)");
  calibrate->add_option("--devices", calibrate_devices,
                        "GPU calibration: use the first N visible GPUs; collectives over 2, 4, ... and N of them "
                        "(default: all)");
  calibrate->add_option("--only", calibrate_only,
                        "GPU calibration: measure only these parts, comma-separated: gemm, memory, attention, "
                        "loss, collectives, copies (default: all)");
  calibrate->add_option("--gemm-duty", calibrate_opt.gemm_duty,
                        "GPU calibration: the fraction of the GEMM and grouped-GEMM sweeps the GPU is busy, idle between "
                        "calls for the rest (default 1: back to back, at the clocks of the power cap; 0.5 measures them "
                        "near the top clock, as in a step that draws less power; docs/calibration/validation.md)");
  auto* validate = app.add_subcommand(
      "validate", "Compare the simulator with a PyTorch profiler trace (--from-trace), or run a scenario on the GPUs "
                  "and in the simulator (CUDA builds); print the errors");
  validate->add_option("--from-trace", trace_opt.traces, "PyTorch profiler trace (Kineto JSON, or .json.gz) of one rank")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  validate->add_option("--scenario", trace_opt.scenarios, "Scenario of the traced job (file or shipped name)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  validate->add_option("--calibration", trace_opt.calibration,
                       "With --from-trace: a calibration file to predict with instead of the one the hardware file names");
  validate->add_flag("--json", trace_opt.json, "JSON output");
  for (auto* sub : {calibrate, validate}) {
    sub->add_option("--hardware", trace_opt.hardware,
                    "Hardware file or shipped name to predict with, in place of the one the scenario names");
  }
  RunCommand run_opt;
  validate->add_option("SCENARIO", run_opt.scenario,
                       "Scenario file or shipped name (GPU validation; with --from-trace, as --scenario)");
#ifdef MOESIM_GPU_MODULE
  auto* run = app.add_subcommand("run", "Execute a scenario's training step on the local GPUs (one GPU per rank)");
  run->add_option("SCENARIO", run_opt.scenario, "Scenario file or shipped name")->required();
  run->add_flag("--json", run_opt.json, "JSON output");
  for (auto* sub : {run, validate}) {
    sub->add_option("--trace", run_opt.trace, "Write a Chrome/Perfetto trace of the measured step (the simulator's format)");
    sub->add_option("--steps", run_opt.steps, "Measured steps after two warm-up steps (the median is reported)")
        ->check(CLI::Range(int64_t{1}, int64_t{100}));
  }
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0 && explain_missing_subcommand(app)) return kExitBadInput;
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }
  if (app.get_subcommands().empty()) {
    std::cerr << app.help() << "A subcommand is required\n";
    return kExitBadInput;
  }

  try {
    if (calibrate->parsed() || validate->parsed()) {
      if (!trace_opt.traces.empty()) {
        if (trace_opt.scenarios.empty() && !run_opt.scenario.empty()) trace_opt.scenarios.push_back(run_opt.scenario);
        if (trace_opt.scenarios.empty()) throw InputError("--scenario", "", "is required with --from-trace");
        const bool duty = calibrate->count("--gemm-duty") > 0;
        if (!calibrate_only.empty() || calibrate_devices || calibrate_opt.quick || duty) {
          throw InputError(!calibrate_only.empty() ? "--only"
                           : calibrate_devices     ? "--devices"
                           : calibrate_opt.quick   ? "--quick"
                                                   : "--gemm-duty",
                           "", "is for calibrating on the GPUs, not from a trace");
        }
        trace_opt.out = calibrate_out;
        print(calibrate->parsed() ? run_calibrate_from_trace(trace_opt) : run_validate_from_trace(trace_opt));
        return 0;
      }
      if (!trace_opt.calibration.empty()) throw InputError("--calibration", "", "is for --from-trace only");
      if (calibrate->parsed()) {
        // On the GPUs: --scenario names the step graph whose attention ops are timed.
        if (trace_opt.scenarios.size() > 1) throw InputError("--scenario", "", "is given once without --from-trace");
        if (!trace_opt.hardware.empty()) throw InputError("--hardware", "", "is for --from-trace only (the GPUs are the hardware)");
        calibrate_opt.attention_scenario = trace_opt.scenarios.empty() ? std::string() : trace_opt.scenarios.front();
        check_calibrate_command(calibrate_opt, calibrate_only, calibrate_devices);
        calibrate_opt.out = calibrate_out;
      } else if (!trace_opt.scenarios.empty()) {
        throw InputError("--scenario", "", "is for --from-trace only (give the scenario as SCENARIO)");
      }
#ifdef MOESIM_GPU_MODULE
      if (calibrate->parsed()) {
        // A progress line on a terminal (progress.hpp): the file goes to stdout without --out.
        const bool show_progress = progress_wanted(calibrate_opt.out.empty());
        const auto start = std::chrono::steady_clock::now();
        if (show_progress) {
          calibrate_opt.progress = [start](int64_t done, int64_t total) { draw_progress(done, total, "measurements", start); };
        }
        return run_gpu_command([&](Distributed& job) {
          // The line ends before anything else is printed, an error too.
          struct EndLine {
            bool drawn;
            ~EndLine() {
              if (drawn) end_progress();
            }
          } end_line{show_progress && job.rank() == 0};
          return gpu_commands().calibrate(calibrate_opt, job);
        });
      }
      if (run_opt.scenario.empty()) throw InputError("SCENARIO", "", "is required (or --from-trace TRACE --scenario SCENARIO)");
      run_opt.json = trace_opt.json;
      run_opt.hardware = trace_opt.hardware;
      return run_gpu_command([&](Distributed& job) { return gpu_commands().validate(run_opt, job); });
#else
      throw InputError(calibrate->parsed() ? "calibrate" : "validate", "", std::string("this moesim was built without CUDA: give --from-trace TRACE --scenario SCENARIO to ") +
                                     (calibrate->parsed() ? "fit a calibration file to" : "validate against") +
                                     " a PyTorch profiler trace");
#endif
    }
#ifdef MOESIM_GPU_MODULE
    if (run->parsed()) {
      return run_gpu_command([&](Distributed& job) { return gpu_commands().run(run_opt, job); });
    }
#endif
    if (sweep->parsed()) return run_sweep_command(sweep_opt);
    if (slice->parsed()) {
      print(run_slice_command(slice_opt));
      return 0;
    }
    if (fusion->parsed()) {
      print(run_fusion_command(fusion_opt));
      return 0;
    }
    if (plan.devices->parsed() || plan.fit->parsed()) {
      run_plan_command(plan, plan_opt);
      return 0;
    }
    if (simulate->parsed()) {
      const std::string ref = opt.scenario.empty() ? std::string(kDefaultScenario) : opt.scenario;
      const Scenario s = load_scenario_with_hardware_flag(read_input(ref, "scenarios", "SCENARIO"), opt.hardware_override);
      const auto start = std::chrono::steady_clock::now();
      const StepGraph graph = opt.graph_file.empty() ? build_step_graph(s) : imported_graph_for(opt.graph_file, s);
      const GraphStats stats = compute_stats(graph);
      EngineOptions eo;
      eo.distinct_ranks = opt.distinct_ranks;
      eo.rank_speed = rank_speeds(s.spec);
      eo.rank_compute_slowdown = rank_compute_slowdowns(s);
      SampledStepsOptions so;
      so.steps = opt.steps > 0 ? opt.steps : s.spec.routing.num_sampled_steps;
      so.threads = opt.threads > 0 ? opt.threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
      so.timeline_of_first_step = !opt.trace.empty() || !opt.memory_csv.empty();
      // Half the machine's memory for the workers' engines: a plan of 16,384 ranks runs on one.
      so.memory_budget_bytes = 0.5 * static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
      const bool show_progress = progress_wanted(opt.json);
      if (show_progress) {
        draw_progress(0, so.steps, "sampled steps", start);
        so.on_step = [&](int64_t done) { draw_progress(done, so.steps, "sampled steps", start); };
      }
      PoweredSteps powered;
      try {
        powered = simulate_in_power_state(CostModel(s.hardware),
                                          [&](const CostModel& cost) { return run_sampled_steps(graph, cost, eo, so); }, &graph);
      } catch (const SimulationError& e) {
        // A graph the user edited may deadlock: that is their input, not our internal error.
        if (opt.graph_file.empty()) throw;
        throw InputError("--graph", "", e.what());
      }
      if (show_progress) end_progress();
      const std::vector<StepResult>& results = powered.results;
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!opt.trace.empty()) {
        write_file_atomically(opt.trace, chrome_trace_json(graph, results.front().timeline, TraceOptions{opt.trace_ranks}),
                              "--trace");
      }
      if (!opt.memory_csv.empty()) write_file_atomically(opt.memory_csv, memory_csv(results.front().timeline), "--memory-csv");
      StepReport report = make_step_report(s, graph, stats, results, wall);
      if (s.hardware.device.power) {
        report.power = powered.state;
        report.power_runs = powered.runs;
      }
      print(opt.json ? step_report_json(report) : step_report_text(report));
    } else if (model_info->parsed()) {
      const InputText input = read_input(opt.model, "models", "MODEL");
      const ModelSpec model = load_model(input);
      print(opt.json ? model_info_json(input.name, model, opt.seq_len) : model_info_text(input.name, model, opt.seq_len));
    } else if (hw_info->parsed()) {
      const InputText input = read_input(opt.hardware, "hardware", "HARDWARE");
      const HardwareSpec hw = load_hardware(input);
      check_calibration(hw);
      print(opt.json ? hardware_info_json(input.name, hw) : hardware_info_text(input.name, hw));
    } else if (sc_info->parsed()) {
      const std::string ref = opt.scenario.empty() ? std::string(kDefaultScenario) : opt.scenario;
      const Scenario s = load_scenario_with_hardware_flag(read_input(ref, "scenarios", "SCENARIO"), opt.hardware_override);
      check_calibration(s.hardware);
      print(opt.json ? scenario_info_json(s) : scenario_info_text(s));
    } else if (graph_stats->parsed()) {
      const std::string ref = opt.scenario.empty() ? std::string(kDefaultScenario) : opt.scenario;
      const Scenario s = load_scenario(read_input(ref, "scenarios", "SCENARIO"));
      const auto start = std::chrono::steady_clock::now();
      const StepGraph graph = build_step_graph(s);
      const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const GraphStats stats = compute_stats(graph);
      print(opt.json ? graph_stats_json(graph, stats, build_s) : graph_stats_text(graph, stats, build_s));
    } else if (graph_export->parsed()) {
      const std::string ref = opt.scenario.empty() ? std::string(kDefaultScenario) : opt.scenario;
      const Scenario s = load_scenario(read_input(ref, "scenarios", "SCENARIO"));
      write_file_atomically(opt.output, export_graph_json(build_step_graph(s)), "--output");
    } else if (graph_import->parsed()) {
      if (!std::filesystem::is_regular_file(opt.graph_file)) throw InputError("FILE", "", "no such file '" + opt.graph_file + "'");
      const InputText input = read_input(opt.graph_file, "graphs", "FILE");
      const auto start = std::chrono::steady_clock::now();
      const StepGraph graph = import_graph_json(input.text, input.name);
      const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const GraphStats stats = compute_stats(graph);
      print(opt.json ? graph_stats_json(graph, stats, read_s) : graph_stats_text(graph, stats, read_s));
    } else if (describe->parsed()) {
      print(opt.markdown ? describe_markdown(opt.describe_kind) : describe_text(opt.describe_kind));
    }
  } catch (const InputError& e) {
    std::cerr << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "moesim: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
  return 0;
}
