// SPDX-License-Identifier: MIT
#include "app/model_info.hpp"

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/format.hpp"
#include "core/units.hpp"
#include "model/accounting.hpp"

namespace moesim {
namespace {

std::map<std::string, int64_t> count_layer_kinds(const ModelSpec& m, bool attention) {
  std::map<std::string, int64_t> out;
  for (const auto& l : m.layer_kinds) {
    ++out[std::string(attention ? enum_name(l.attention) : enum_name(l.ffn))];
  }
  return out;
}

}  // namespace

std::string model_info_text(const std::string& file, const ModelSpec& m, int64_t seq_len) {
  const ParamReport p = count_params(m);
  const FlopReport f = count_flops(m, seq_len);
  std::ostringstream out;
  out << m.name << "  (" << file << ")\n";
  out << "  layers            " << m.num_layers << ":";
  for (const auto& [kind, n] : count_layer_kinds(m, true)) out << " " << n << " " << kind;
  out << ";";
  for (const auto& [kind, n] : count_layer_kinds(m, false)) out << " " << n << " " << kind;
  out << "\n";
  out << "  parameters        " << format_count(static_cast<double>(p.total_params)) << " total ("
      << format_count(static_cast<double>(p.text_params)) << " text";
  if (p.vision_params > 0) out << " + " << format_count(static_cast<double>(p.vision_params)) << " vision";
  out << ")\n";
  out << "  active per token  " << format_count(p.active_params) << " (excluding the input embedding; "
      << format_count(p.active_params_with_embedding) << " with it)\n";
  out << "  weights           " << format_quantity(p.total_weight_bytes, Dimension::bytes);
  for (const auto& [dtype, bytes] : p.weight_bytes) {
    out << "  [" << enum_name(dtype) << " " << format_quantity(bytes, Dimension::bytes) << "]";
  }
  out << "\n";
  out << "  FLOPs per token   at sequence " << seq_len << ": forward " << format_sci(f.fwd) << ", training step "
      << format_sci(f.train) << "\n";
  out << "    matmul                " << format_sci(f.matmul_fwd) << " (forward)\n";
  for (const auto& [term, flops] : f.attention_fwd) {
    char line[128];
    std::snprintf(line, sizeof line, "    %-22s%s (forward)\n", term.c_str(), format_sci(flops).c_str());
    out << line;
  }
  out << "\n  component                       params        active\n";
  for (const auto& c : p.components) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-26s %12s  %12s\n", c.name.c_str(),
                  format_count(static_cast<double>(c.params)).c_str(), format_count(c.active_params).c_str());
    out << line;
  }
  return out.str();
}

std::string model_info_json(const std::string& file, const ModelSpec& m, int64_t seq_len) {
  const ParamReport p = count_params(m);
  const FlopReport f = count_flops(m, seq_len);
  nlohmann::json j;
  j["name"] = m.name;
  j["file"] = file;
  j["num_layers"] = m.num_layers;
  j["layers_by_attention"] = count_layer_kinds(m, true);
  j["layers_by_ffn"] = count_layer_kinds(m, false);
  j["total_params"] = p.total_params;
  j["text_params"] = p.text_params;
  j["vision_params"] = p.vision_params;
  j["active_params"] = p.active_params;
  j["active_params_with_embedding"] = p.active_params_with_embedding;
  nlohmann::json bytes = nlohmann::json::object();
  for (const auto& [dtype, b] : p.weight_bytes) bytes[std::string(enum_name(dtype))] = b;
  bytes["total"] = p.total_weight_bytes;
  j["weight_bytes"] = bytes;
  j["seq_len"] = seq_len;
  j["flops_per_token_fwd"] = f.fwd;
  j["flops_per_token_train"] = f.train;
  nlohmann::json breakdown = {{"matmul", f.matmul_fwd}};
  for (const auto& [term, flops] : f.attention_fwd) breakdown[term] = flops;
  j["flops_per_token_fwd_by_term"] = breakdown;
  nlohmann::json components = nlohmann::json::array();
  for (const auto& c : p.components) {
    components.push_back({{"name", c.name},
                          {"params", c.params},
                          {"active_params", c.active_params},
                          {"dtype", std::string(enum_name(c.dtype))}});
  }
  j["components"] = components;
  return j.dump(2) + "\n";
}

}  // namespace moesim
