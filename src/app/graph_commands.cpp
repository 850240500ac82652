// SPDX-License-Identifier: MIT
#include "app/graph_commands.hpp"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/format.hpp"
#include "core/units.hpp"

namespace moesim {

std::string graph_stats_text(const StepGraph& g, const GraphStats& s, double build_s) {
  std::ostringstream out;
  out << g.scenario << ": op graph of one training step\n";
  out << "  ranks             " << s.num_ranks << " in " << s.num_programs << " program(s), " << s.num_micro_batches
      << " micro-batch(es) of " << g.tokens_per_micro_batch << " tokens per rank\n";
  out << "  ops               " << s.num_program_ops << " stored, " << s.num_ops << " run over all ranks\n";
  out << "  tokens per step   " << format_count(static_cast<double>(s.tokens_per_step)) << "\n";
  out << "  FLOPs per step    " << format_sci(s.flops_per_step) << " (model " << format_sci(s.model_flops_per_step)
      << ")\n";
  char line[200];
  std::snprintf(line, sizeof line, "  built in          %.3f s\n\n", build_s);
  out << line;
  out << "  kind                       ops (all ranks)        FLOPs    bytes moved\n";
  for (const auto& [kind, k] : s.by_kind) {
    std::snprintf(line, sizeof line, "  %-24s %15lld %12s %14s\n", std::string(enum_name(kind)).c_str(),
                  static_cast<long long>(k.count), k.flops > 0 ? format_sci(k.flops).c_str() : "-",
                  k.comm_bytes > 0 ? format_quantity(k.comm_bytes, Dimension::bytes).c_str() : "-");
    out << line;
  }
  return out.str();
}

std::string graph_stats_json(const StepGraph& g, const GraphStats& s, double build_s) {
  nlohmann::json j;
  j["scenario"] = g.scenario;
  j["num_ranks"] = s.num_ranks;
  j["num_programs"] = s.num_programs;
  j["num_ops"] = s.num_ops;
  j["num_program_ops"] = s.num_program_ops;
  j["num_micro_batches"] = s.num_micro_batches;
  j["tokens_per_micro_batch"] = g.tokens_per_micro_batch;
  j["tokens_per_step"] = s.tokens_per_step;
  j["flops_per_step"] = s.flops_per_step;
  j["model_flops_per_step"] = s.model_flops_per_step;
  j["all_to_all_remote_bytes"] = s.all_to_all_remote_bytes;
  j["build_s"] = build_s;
  nlohmann::json kinds = nlohmann::json::object();
  nlohmann::json bytes = nlohmann::json::object();
  for (const auto& [kind, k] : s.by_kind) {
    const std::string name(enum_name(kind));
    kinds[name] = {{"count", k.count}, {"flops", k.flops}, {"bytes", k.comm_bytes}};
    if (is_communication(kind) || kind == OpKind::swap_in || kind == OpKind::swap_out) bytes[name] = k.comm_bytes;
  }
  j["ops_by_kind"] = kinds;
  j["bytes_by_collective"] = bytes;
  return j.dump(2) + "\n";
}

}  // namespace moesim
