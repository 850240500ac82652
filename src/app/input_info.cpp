// SPDX-License-Identifier: MIT
#include "app/input_info.hpp"

#include <sstream>

#include <nlohmann/json.hpp>

#include "app/format.hpp"
#include "core/units.hpp"
#include "plan/parallel_plan.hpp"

namespace moesim {
namespace {


struct KindRows {
  std::string kind;
  std::string folder;
  std::vector<FieldRow> rows;
};

std::vector<KindRows> kinds(const std::string& kind) {
  std::vector<KindRows> all{{"model", "models/", describe_model_fields()},
                            {"hardware", "hardware/", describe_hardware_fields()},
                            {"scenario", "scenarios/", describe_scenario_fields()}};
  if (kind.empty()) return all;
  for (auto& k : all) {
    if (k.kind == kind) return {k};
  }
  return {};
}

}  // namespace

std::string hardware_info_text(const std::string& file, const HardwareSpec& hw) {
  std::ostringstream out;
  const auto& d = hw.device;
  out << hw.name << "  (" << file << ")\n";
  out << "  device            " << d.name << " - " << d.description << "\n";
  out << "  peak bf16         " << format(d.peak_flops.bf16);
  if (d.peak_flops.fp8) out << ", fp8 " << format(*d.peak_flops.fp8);
  out << "\n";
  out << "  HBM               " << format(d.hbm_capacity) << " at " << format(d.hbm_bandwidth) << "\n";
  out << "  host memory       " << format(d.host_memory.capacity_per_device) << " per device at "
      << format(d.host_memory.bandwidth) << " each way"
      << (d.host_memory.over_scale_up ? ", over the scale-up fabric (shares its port)" : "") << "\n";
  out << "  nodes             " << hw.devices_per_node << " devices per node";
  if (hw.max_devices) out << ", at most " << *hw.max_devices << " devices";
  out << "\n";
  const auto& up = hw.fabric.scale_up;
  out << "  scale-up          " << up.technology << ": " << up.domain_size << " devices, " << format(up.port_bandwidth)
      << " per device each way, " << format(up.latency) << "\n";
  auto tiers = [&](const std::vector<SwitchTierSpec>& list) {
    for (const SwitchTierSpec& t : list) {
      out << "    tier            " << t.name << ": " << t.span << " devices per switch, " << format(t.bandwidth_per_device)
          << " per device, " << format(t.latency) << "\n";
    }
  };
  tiers(up.tiers);
  if (hw.fabric.scale_out) {
    const auto& so = *hw.fabric.scale_out;
    out << "  scale-out         " << so.technology << ": " << so.nics_per_device << " x " << format(so.nic_bandwidth)
        << " per device, " << format(so.latency) << "\n";
    tiers(so.tiers);
  }
  return out.str();
}

std::string hardware_info_json(const std::string& file, const HardwareSpec& hw) {
  const auto& d = hw.device;
  nlohmann::json j;
  j["name"] = hw.name;
  j["file"] = file;
  j["device"] = {{"name", d.name},
                 {"description", d.description},
                 {"peak_bf16_flops", d.peak_flops.bf16.value},
                 {"hbm_capacity_bytes", d.hbm_capacity.value},
                 {"hbm_bandwidth_bytes_per_s", d.hbm_bandwidth.value},
                 {"host_memory_bytes", d.host_memory.capacity_per_device.value},
                 {"host_bandwidth_bytes_per_s", d.host_memory.bandwidth.value},
                 {"host_memory_over_scale_up", d.host_memory.over_scale_up}};
  if (d.peak_flops.fp8) j["device"]["peak_fp8_flops"] = d.peak_flops.fp8->value;
  j["devices_per_node"] = hw.devices_per_node;
  j["max_devices"] = hw.max_devices ? nlohmann::json(*hw.max_devices) : nlohmann::json(nullptr);
  auto tiers = [](const std::vector<SwitchTierSpec>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const SwitchTierSpec& t : list) {
      out.push_back({{"name", t.name},
                     {"span", t.span},
                     {"bandwidth_per_device_bytes_per_s", t.bandwidth_per_device.value},
                     {"latency_s", t.latency.value}});
    }
    return out;
  };
  j["scale_up"] = {{"domain_size", hw.fabric.scale_up.domain_size},
                   {"port_bandwidth_bytes_per_s", hw.fabric.scale_up.port_bandwidth.value},
                   {"latency_s", hw.fabric.scale_up.latency.value},
                   {"tiers", tiers(hw.fabric.scale_up.tiers)}};
  if (hw.fabric.scale_out) {
    j["scale_out"] = {{"nics_per_device", hw.fabric.scale_out->nics_per_device},
                      {"nic_bandwidth_bytes_per_s", hw.fabric.scale_out->nic_bandwidth.value},
                      {"latency_s", hw.fabric.scale_out->latency.value},
                      {"tiers", tiers(hw.fabric.scale_out->tiers)}};
  }
  return j.dump(2) + "\n";
}

namespace {

struct PlanNumbers {
  int64_t dp;
  int64_t micro_steps;
  int64_t tokens_per_step;
  int64_t experts_per_ep_rank;
  int64_t expert_dp;
};

PlanNumbers plan_numbers(const Scenario& s) {
  const auto& p = s.spec.parallel;
  const auto& b = s.spec.batch;
  PlanNumbers n{};
  n.dp = p.dp();
  n.micro_steps = micro_batches_per_step(s.spec);
  n.tokens_per_step = b.global_batch_size * b.sequence_length;
  const ParallelPlan plan = build_parallel_plan(s.spec);
  n.experts_per_ep_rank = s.model.moe ? plan.experts_per_rank(s.model.moe->num_experts) : 0;
  n.expert_dp = plan.group_size(GroupKind::edp);
  return n;
}

}  // namespace

std::string scenario_info_text(const Scenario& s) {
  const auto& p = s.spec.parallel;
  const PlanNumbers n = plan_numbers(s);
  std::ostringstream out;
  out << s.spec.name << "  (" << s.file << ")\n";
  out << "  model             " << s.model.name << "  (" << s.model_file << ")\n";
  out << "  hardware          " << s.hardware.name << "  (" << s.hardware_file << ")\n";
  out << "  devices           " << s.spec.num_devices << "\n";
  out << "  training          " << enum_name(s.spec.training.mode);
  if (s.spec.training.lora) {
    out << " rank " << s.spec.training.lora->rank << " on " << s.spec.training.lora->targets.size() << " targets";
  }
  out << ", " << enum_name(s.spec.training.precision.compute) << ", " << enum_name(s.spec.training.optimizer.kind)
      << "\n";
  out << "  batch             " << s.spec.batch.global_batch_size << " x " << s.spec.batch.sequence_length
      << " tokens = " << format_count(static_cast<double>(n.tokens_per_step)) << " tokens per step, "
      << n.micro_steps << " micro-step(s) of " << s.spec.batch.micro_batch_size << "\n";
  out << "  plan              fsdp shard " << p.fsdp.shard << " x replicate " << p.fsdp.replicate << ", ep " << p.ep
      << " (" << n.experts_per_ep_rank << " experts per rank, expert-tp " << p.expert_tp() << ", expert-dp "
      << n.expert_dp << "), tp " << p.tp.degree << ", pp " << p.pp.stages << " (" << enum_name(p.pp.schedule)
      << "), cp " << p.cp << "\n";
  const bool once = resolved_gradient_sync(p.fsdp, p.pp.stages) == GradientSync::last_micro_batch;
  out << "  data parallel     ZeRO stage " << p.fsdp.zero_stage << ", gradients reduced "
      << (once ? "once per step" : "every micro-batch");
  if (p.fsdp.offload != OffloadKind::none) out << "; CPU offload of " << enum_name(p.fsdp.offload);
  out << "\n";
  out << "  recompute         " << enum_name(s.spec.recompute.policy) << "; swap "
      << (s.spec.swap.enabled ? "on" : "off") << "; loss " << enum_name(s.spec.loss.kind) << "\n";
  return out.str();
}

std::string scenario_info_json(const Scenario& s) {
  const auto& p = s.spec.parallel;
  const PlanNumbers n = plan_numbers(s);
  nlohmann::json j;
  j["name"] = s.spec.name;
  j["file"] = s.file;
  j["model"] = s.model.name;
  j["model_file"] = s.model_file;
  j["hardware"] = s.hardware.name;
  j["hardware_file"] = s.hardware_file;
  j["num_devices"] = s.spec.num_devices;
  j["mode"] = enum_name(s.spec.training.mode);
  j["tokens_per_step"] = n.tokens_per_step;
  j["micro_steps"] = n.micro_steps;
  j["parallel"] = {{"fsdp_shard", p.fsdp.shard}, {"fsdp_replicate", p.fsdp.replicate}, {"dp", n.dp},
                   {"ep", p.ep},                 {"expert_dp", n.expert_dp},            {"tp", p.tp.degree},
                   {"expert_tp", p.expert_tp()},
                   {"pp", p.pp.stages},          {"cp", p.cp},
                   {"experts_per_ep_rank", n.experts_per_ep_rank},
                   {"zero_stage", p.fsdp.zero_stage},
                   {"gradient_sync", enum_name(resolved_gradient_sync(p.fsdp, p.pp.stages))}};
  j["sweep_axes"] = s.spec.sweep.axes.size();
  return j.dump(2) + "\n";
}

std::string describe_text(const std::string& kind) {
  std::ostringstream out;
  for (const auto& k : kinds(kind)) {
    out << k.kind << " files (" << k.folder << ")\n";
    for (const auto& r : k.rows) {
      out << "  " << r.path << "  [" << r.type << "]  "
          << (r.default_value.empty() ? "required" : "default: " + r.default_value) << "\n      " << r.doc << "\n";
    }
    out << "\n";
  }
  return out.str();
}

std::string describe_markdown(const std::string& kind) {
  std::ostringstream out;
  if (kind.empty()) {
    out << "# Input reference\n\n"
           "Generated by `moesim describe --markdown` from the field declarations in the code; a test checks "
           "that this page matches them. Quantities are strings with units (\"900 GB/s\", \"141 GiB\", "
           "\"1.5 us\", \"989 TFLOP/s\"); K, M, G, T, P are decimal prefixes, Ki, Mi, Gi, Ti binary; B is a "
           "byte and b a bit. Layer sets are 1-based: \"1\", \"2-5\", \"4-92:4,93\", \"all\". An unknown "
           "key, a missing required key, a wrong type, a bad unit or an inconsistent value is an error "
           "naming the file and the JSON path (exit code 2).\n\n";
  }
  for (const auto& k : kinds(kind)) {
    out << "## " << k.kind << " files (" << k.folder << ")\n\n" << rows_to_markdown(k.rows) << "\n";
  }
  return out.str();
}

}  // namespace moesim
