// SPDX-License-Identifier: MIT
#include "scenario/slice.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "scenario/scenario_checks.hpp"

namespace moesim {
namespace {

using Json = nlohmann::ordered_json;

// The layer kinds of the slice: the `num_layers` most frequent kinds of the model (ties: the one
// that appears first), in the order they first appear, repeated when the model has fewer kinds.
std::vector<LayerKinds> slice_layer_kinds(const ModelSpec& model, int64_t num_layers) {
  struct Seen {
    LayerKinds kinds;
    int64_t count = 0;
    int64_t first = 0;
  };
  std::vector<Seen> seen;
  for (int64_t i = 0; i < static_cast<int64_t>(model.layer_kinds.size()); ++i) {
    const LayerKinds& k = model.layer_kinds[static_cast<size_t>(i)];
    auto it = std::find_if(seen.begin(), seen.end(),
                           [&](const Seen& s) { return s.kinds.attention == k.attention && s.kinds.ffn == k.ffn; });
    if (it == seen.end()) {
      seen.push_back({k, 1, i});
    } else {
      ++it->count;
    }
  }
  std::stable_sort(seen.begin(), seen.end(), [](const Seen& a, const Seen& b) { return a.count > b.count; });
  seen.resize(std::min(seen.size(), static_cast<size_t>(num_layers)));
  std::sort(seen.begin(), seen.end(), [](const Seen& a, const Seen& b) { return a.first < b.first; });
  std::vector<LayerKinds> out;
  for (int64_t i = 0; i < num_layers; ++i) out.push_back(seen[static_cast<size_t>(i) % seen.size()].kinds);
  return out;
}

void divide(Json& block, const char* key, int64_t by, int64_t at_least = 1) {
  if (by > 1 && block.contains(key)) block[key] = std::max<int64_t>(at_least, block[key].get<int64_t>() / by);
}

std::string kinds_text(const LayerKinds& k) {
  return std::string(enum_name(k.attention)) + " + " + std::string(enum_name(k.ffn));
}

}  // namespace

SliceFiles make_slice(const Scenario& source, const InputText& scenario_text, const InputText& model_text,
                      const SliceOptions& o) {
  const ModelSpec& model = source.model;
  const ParallelSpec& plan = source.spec.parallel;
  if (o.num_layers < 1 || o.num_layers > model.num_layers) {
    throw InputError("--layers", "", "must be between 1 and the model's " + std::to_string(model.num_layers) +
                                         " layers, got " + std::to_string(o.num_layers));
  }
  if (o.num_devices < 1 || o.num_devices > source.spec.num_devices) {
    throw InputError("--devices", "", "must be between 1 and the scenario's " + std::to_string(source.spec.num_devices) +
                                          " devices, got " + std::to_string(o.num_devices));
  }
  if (plan.cp > 1) {
    throw InputError(source.file, "/parallel/cp",
                     "is " + std::to_string(plan.cp) +
                         ": a context-parallel rank's attention is not a smaller attention, so it has no slice; "
                         "slice the plan with cp 1");
  }
  const int64_t tp = plan.tp.degree;
  const int64_t etp = plan.expert_tp();
  const bool has_ep = plan.ep > 1;
  const int64_t slice_ep = has_ep ? o.num_devices : 1;

  // The model.
  Json m = Json::parse(model_text.text);
  const std::vector<LayerKinds> kinds = slice_layer_kinds(model, o.num_layers);
  Json layers = Json::object();
  layers["attention"] = std::string(enum_name(kinds.front().attention));
  layers["ffn"] = std::string(enum_name(kinds.front().ffn));
  Json overrides = Json::array();
  for (size_t i = 1; i < kinds.size(); ++i) {
    Json ov = Json::object();
    ov["layers"] = std::to_string(i + 1);
    if (kinds[i].attention != kinds.front().attention) ov["attention"] = std::string(enum_name(kinds[i].attention));
    if (kinds[i].ffn != kinds.front().ffn) ov["ffn"] = std::string(enum_name(kinds[i].ffn));
    if (ov.size() > 1) overrides.push_back(ov);
  }
  if (!overrides.empty()) layers["overrides"] = overrides;
  m["layers"] = layers;
  m["num_layers"] = o.num_layers;
  auto uses = [&](auto kind) {
    return std::any_of(kinds.begin(), kinds.end(), [&](const LayerKinds& k) {
      if constexpr (std::is_same_v<decltype(kind), AttentionKind>) {
        return k.attention == kind;
      } else {
        return k.ffn == kind;
      }
    });
  };
  // A block no slice layer uses must go (the model reader refuses unused blocks).
  if (!uses(AttentionKind::gqa) && !uses(AttentionKind::mha)) m.erase("gqa");
  if (!uses(AttentionKind::mla) && !uses(AttentionKind::mla_dsa)) m.erase("mla");
  if (!uses(AttentionKind::mla_dsa)) m.erase("dsa_indexer");
  if (!uses(AttentionKind::kda)) m.erase("kda");
  if (!uses(FfnKind::dense)) m.erase("dense_ffn");
  if (!uses(FfnKind::moe)) m.erase("moe");
  m.erase("vision");
  if (m.contains("attention_residuals")) {
    m["attention_residuals"]["block_size"] = std::min(m["attention_residuals"]["block_size"].get<int64_t>(), o.num_layers);
  }
  // A TP rank's shapes.
  if (m.contains("gqa")) {
    divide(m["gqa"], "num_heads", tp);
    divide(m["gqa"], "num_kv_heads", tp);
  }
  if (m.contains("mla")) divide(m["mla"], "num_heads", tp);
  if (m.contains("kda")) divide(m["kda"], "num_heads", tp);
  if (m.contains("dense_ffn")) divide(m["dense_ffn"], "intermediate_size", tp);
  if (tp > 1) m["vocab_size"] = (m["vocab_size"].get<int64_t>() + tp - 1) / tp;
  int64_t num_experts = 0;
  if (m.contains("moe")) {
    Json& moe = m["moe"];
    const int64_t shared = moe.value("shared_intermediate_size", int64_t{0});
    if (tp > 1 && moe.value("num_shared_experts", int64_t{0}) > 0) {
      moe["shared_intermediate_size"] = (shared > 0 ? shared : moe["expert_intermediate_size"].get<int64_t>()) / tp;
    }
    divide(moe, "expert_intermediate_size", etp);
    num_experts = has_ep ? model.moe->num_experts / plan.ep * slice_ep : model.moe->num_experts;
    moe["num_experts"] = num_experts;
    moe["top_k"] = std::min(model.moe->top_k, num_experts);
  }
  const std::string model_name = model.name + "-l" + std::to_string(o.num_layers) +
                                 (num_experts > 0 ? "-e" + std::to_string(num_experts) : std::string());
  m["name"] = model_name;
  std::ostringstream mdoc;
  mdoc << "A " << o.num_layers << "-layer slice of " << model.name << " (" << model_text.name
       << ") at the per-rank shapes of scenario " << source.spec.name << ", written by `moesim slice`: layers";
  for (const LayerKinds& k : kinds) mdoc << (&k == &kinds.front() ? " " : ", ") << kinds_text(k);
  if (num_experts > 0) {
    mdoc << "; " << num_experts << " routed experts (" << model.moe->num_experts / (has_ep ? plan.ep : 1)
         << " per EP rank of the plan x " << slice_ep << "), top-" << std::min(model.moe->top_k, num_experts);
  }
  if (tp > 1) mdoc << "; heads, FFN widths and vocabulary of one of " << tp << " TP ranks";
  mdoc << ".";
  m["doc"] = mdoc.str();

  // The scenario.
  Json s = Json::parse(scenario_text.text);
  s.erase("sweep");
  s.erase("stragglers");
  const int64_t dp = plan.dp();
  const int64_t micro = source.spec.batch.micro_batch_size;
  const int64_t micro_steps = std::max<int64_t>(1, source.spec.batch.global_batch_size / (micro * dp));
  s["name"] = source.spec.name + "-slice";
  s["model"] = o.model_ref;
  s["hardware"] = o.hardware_ref;
  s["num_devices"] = o.num_devices;
  s["batch"]["global_batch_size"] = micro * micro_steps * o.num_devices;
  Json parallel = Json::object();
  Json fsdp = s["parallel"].contains("fsdp") ? s["parallel"]["fsdp"] : Json::object();
  const int64_t shard = (plan.fsdp.shard == 1 && !has_ep) ? 1 : o.num_devices;
  fsdp["shard"] = shard;
  fsdp["replicate"] = o.num_devices / shard;
  parallel["fsdp"] = fsdp;
  parallel["ep"] = slice_ep;
  parallel["tp"] = Json{{"degree", 1}, {"sequence_parallel", false}};
  parallel["pp"] = Json{{"stages", 1}, {"schedule", "1f1b"}};
  parallel["cp"] = 1;
  s["parallel"] = parallel;
  std::vector<std::string> changed;
  for (const char* part : {"recompute", "swap"}) {
    if (s.contains(part) && s[part].contains("layers") && s[part]["layers"] != "all") {
      s[part]["layers"] = "all";
      changed.push_back(std::string(part) + ".layers is all");
    }
  }
  if (s.contains("routing")) {
    Json& r = s["routing"];
    if (r.value("distribution", std::string()) == "histogram") {
      r["distribution"] = "uniform";
      r.erase("histogram");
      changed.push_back("routing is uniform (the histogram is of the full model's experts)");
    }
    if (r.value("groups", int64_t{1}) > 1 && model.moe && num_experts != model.moe->num_experts) {
      r.erase("groups");
      r.erase("groups_per_token");
      changed.push_back("no group-limited routing");
    }
  }
  // The executor runs neither local-first nor chunked expert dispatch (the slice is for validate).
  if (s.contains("overlap")) {
    Json& ov = s["overlap"];
    if (ov.value("moe_local_first", false)) {
      ov["moe_local_first"] = false;
      changed.push_back("overlap.moe_local_first is false (the executor does not split the expert GEMMs)");
    }
    if (ov.value("moe_dispatch_chunks", int64_t{1}) > 1) {
      ov["moe_dispatch_chunks"] = 1;
      changed.push_back("overlap.moe_dispatch_chunks is 1 (the executor dispatches in one piece)");
    }
  }
  // LoRA targets of projections the slice lost (K3's dense FFN goes with its dense layer).
  const ModelSpec sliced_model = load_model(InputText{model_text.name + " (sliced)", m.dump(), false});
  if (source.spec.training.lora && s["training"].contains("lora")) {
    Json kept = Json::array();
    for (const LoraTarget t : source.spec.training.lora->targets) {
      if (lora_target_exists(sliced_model, t)) {
        kept.push_back(std::string(enum_name(t)));
      } else {
        changed.push_back("no LoRA on " + std::string(enum_name(t)) + " (no such projection in the slice)");
      }
    }
    s["training"]["lora"]["targets"] = kept;
  }
  std::ostringstream sdoc;
  sdoc << "Written by `moesim slice " << source.spec.name << " --layers " << o.num_layers << " --devices "
       << o.num_devices << "`: " << model_name << " on " << o.num_devices << " device(s), FSDP shard " << shard
       << (has_ep ? ", EP " + std::to_string(slice_ep) : std::string()) << ", " << micro_steps
       << " micro-batch(es) of " << micro << " x " << source.spec.batch.sequence_length
       << " tokens per device as a data-parallel rank of " << source.spec.name << " runs; recipe, recompute, swap, loss "
       << "and fused ops as the source";
  for (const std::string& c : changed) sdoc << "; " << c;
  sdoc << ".";
  s["doc"] = sdoc.str();

  SliceFiles out;
  out.model_json = m.dump(2) + "\n";
  out.scenario_json = s.dump(2) + "\n";
  std::ostringstream sum;
  sum << "slice of " << source.spec.name << " (" << source.spec.num_devices << " devices: ep " << plan.ep << ", tp " << tp
      << ", dp " << dp << ")\n";
  sum << "  model     " << model_name << ": " << o.num_layers << " layer(s):";
  for (const LayerKinds& k : kinds) sum << (&k == &kinds.front() ? " " : ", ") << kinds_text(k);
  sum << "\n";
  if (num_experts > 0) {
    sum << "            " << num_experts << " routed experts, top-" << std::min(model.moe->top_k, num_experts) << " ("
        << model.moe->num_experts / (has_ep ? plan.ep : 1) << " per EP rank)\n";
  }
  sum << "  plan      " << o.num_devices << " device(s): fsdp shard " << shard << ", ep " << slice_ep << "; "
      << micro_steps << " micro-batch(es) of " << micro << " x " << source.spec.batch.sequence_length << " tokens\n";
  for (const std::string& c : changed) sum << "  changed   " << c << "\n";
  out.summary = sum.str();
  return out;
}

}  // namespace moesim
