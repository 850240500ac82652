// SPDX-License-Identifier: MIT
#include "app/slice_command.hpp"

#include <filesystem>

#include <CLI/CLI.hpp>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"
#include "hardware/hardware_spec.hpp"
#include "scenario/slice.hpp"

namespace moesim {
namespace fs = std::filesystem;

namespace {

// How the written scenario names its hardware: a shipped file by its bare name, a file on disk
// by its absolute path (the slice may be written anywhere).
std::string hardware_reference(const std::string& name, bool embedded) {
  if (embedded) {
    const fs::path p(name);
    if (p.parent_path() == "hardware" && p.extension() == ".json") return p.stem().string();
  }
  return fs::absolute(fs::path(name)).lexically_normal().string();
}

}  // namespace

CLI::App* add_slice_command(CLI::App& app, SliceCliOptions& o) {
  auto* cmd = app.add_subcommand(
      "slice", "Write a 1-2 layer slice of a scenario's model at its plan's per-rank shapes, to run on a few GPUs "
               "(moesim validate) - as scenarios/calibration/ was made (docs/calibration/guide.md)");
  cmd->add_option("SCENARIO", o.scenario, "Scenario file or shipped name whose plan gives the shapes")->required();
  cmd->add_option("--layers", o.num_layers, "Layers of the slice: the model's most frequent layer kinds (default 2)");
  cmd->add_option("--devices", o.num_devices, "Devices the slice runs on (default 1)");
  cmd->add_option("--hardware", o.hardware, "Hardware file or shipped name of the machine the slice runs on "
                                            "(default: the scenario's)");
  cmd->add_option("-o,--output", o.output,
                  "Scenario file to write; the model goes beside it with .model.json in place of .json")
      ->required();
  return cmd;
}

std::string run_slice_command(const SliceCliOptions& o) {
  const InputText input = read_input(o.scenario, "scenarios", "SCENARIO");
  // The source plan is checked on its own machine; --hardware is the machine the slice runs on.
  const Scenario source = load_scenario(input);
  if (!o.hardware.empty()) (void)load_hardware(read_input(o.hardware, "hardware", "--hardware"));
  const InputText model_text = read_referenced(input, "/model", source.spec.model, "models");
  if (!o.output.ends_with(".json")) throw InputError("--output", "", "must end in .json, got '" + o.output + "'");
  const std::string model_path = o.output.substr(0, o.output.size() - 5) + ".model.json";
  SliceOptions options;
  options.num_layers = o.num_layers;
  options.num_devices = o.num_devices;
  options.model_ref = fs::path(model_path).filename().string();
  if (o.hardware.empty()) {
    const bool embedded = !fs::is_regular_file(source.hardware_file);
    options.hardware_ref = hardware_reference(source.hardware_file, embedded);
  } else {
    // A shipped name stays a name; a file is named by its absolute path.
    options.hardware_ref = fs::is_regular_file(o.hardware) ? hardware_reference(o.hardware, false) : o.hardware;
  }
  const SliceFiles files = make_slice(source, input, model_text, options);
  write_file_atomically(model_path, files.model_json, "--output");
  write_file_atomically(o.output, files.scenario_json, "--output");
  // What was written must load as it will in validate and simulate.
  (void)load_scenario(read_input(o.output, "scenarios", "--output"));
  return files.summary + "wrote " + o.output + " and " + model_path + "\n";
}

}  // namespace moesim
