// SPDX-License-Identifier: MIT
#include "cost/kernel_points.hpp"

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/enum_names.hpp"
#include "core/error.hpp"
#include "core/units.hpp"

namespace moesim {

namespace {

using nlohmann::json;

constexpr std::string_view kMemoryByKind = "memory_by_kind.";  // + a MemoryKindsSpec kind

bool is_constant_field(std::string_view field) {
  if (field == "collective" || field == "collective_scale_out" || field == "memory") return true;
  if (!field.starts_with(kMemoryByKind)) return false;
  return std::ranges::find(MemoryKindsSpec::kinds, field.substr(kMemoryByKind.size())) != MemoryKindsSpec::kinds.end();
}

class Reader {
 public:
  explicit Reader(const InputText& input) : file_(input.name) {}

  [[noreturn]] void fail(const std::string& path, const std::string& message) const { throw InputError(file_, path, message); }

  const json& object(const json& j, const std::string& path, std::initializer_list<std::string_view> allowed) const {
    if (!j.is_object()) fail(path, "must be an object");
    for (const auto& [key, value] : j.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) fail(pointer_append(path, key), "unknown key");
    }
    return j;
  }
  const json& member(const json& j, const std::string& path, std::string_view key) const {
    if (!j.contains(key)) fail(pointer_append(path, key), "required");
    return j.at(std::string(key));
  }
  std::string text(const json& j, const std::string& path, std::string_view key) const {
    const json& v = member(j, path, key);
    if (!v.is_string()) fail(pointer_append(path, key), "must be a string");
    return v.get<std::string>();
  }
  double positive(const json& v, const std::string& path) const {
    if (!v.is_number() || !(v.get<double>() > 0)) fail(path, "must be a positive number");
    return v.get<double>();
  }
  double positive(const json& j, const std::string& path, std::string_view key) const {
    return positive(member(j, path, key), pointer_append(path, key));
  }
  double bandwidth(const json& j, const std::string& path, std::string_view key) const {
    const std::string p = pointer_append(path, key);
    try {
      const double v = parse_quantity(text(j, path, key), Dimension::bytes_per_s);
      if (!(v > 0)) fail(p, "must be positive");
      return v;
    } catch (const ValueError& e) {
      fail(p, e.what());
    }
  }

 private:
  std::string file_;
};

// A published row as (x, FLOPs, seconds), per the set's kind (kernel_points.hpp).
std::vector<KernelPoint> read_points(const Reader& r, const json& set, const std::string& path, const std::string& kind) {
  const json& cols = r.member(set, path, "columns");
  if (!cols.is_array()) r.fail(path + "/columns", "must be an array of names");
  std::vector<std::string> names;
  for (const json& c : cols) {
    if (!c.is_string()) r.fail(path + "/columns", "must be an array of names");
    names.push_back(c.get<std::string>());
  }
  auto column = [&](std::string_view name) -> std::optional<size_t> {
    const auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? std::nullopt : std::optional<size_t>(static_cast<size_t>(it - names.begin()));
  };
  auto need = [&](std::string_view name) {
    const auto c = column(name);
    if (!c) r.fail(path + "/columns", "needs a column '" + std::string(name) + "'");
    return *c;
  };
  const auto seconds_col = column("seconds");
  const auto throughput_col = column("flops_per_s");
  if (seconds_col.has_value() == throughput_col.has_value()) r.fail(path + "/columns", "needs one of 'seconds' and 'flops_per_s'");

  // Attention: the shapes shared by every row of the set.
  double heads = 0, dqk = 0, dv = 0, tokens = 0, batch_fixed = 0, counted = 2;
  bool causal = false, backward = false;
  if (kind == "attention") {
    heads = r.positive(set, path, "heads");
    dqk = r.positive(set, path, "head_dim");
    dv = set.contains("head_dim_v") ? r.positive(set, path, "head_dim_v") : dqk;
    if (set.contains("tokens")) tokens = r.positive(set, path, "tokens");
    if (set.contains("batch")) batch_fixed = r.positive(set, path, "batch");
    if (tokens > 0 && batch_fixed > 0) r.fail(path + "/batch", "give tokens (a fixed batch x seq) or batch, not both");
    if (set.contains("backward_flops_counted")) counted = r.positive(set, path, "backward_flops_counted");
    const json& c = r.member(set, path, "causal");
    if (!c.is_boolean()) r.fail(path + "/causal", "must be true or false");
    causal = c.get<bool>();
    const std::string phase = r.text(set, path, "phase");
    if (phase != "forward" && phase != "backward") r.fail(path + "/phase", "must be forward or backward");
    backward = phase == "backward";
  }

  const json& rows = r.member(set, path, "rows");
  if (!rows.is_array() || rows.empty()) r.fail(path + "/rows", "must be a non-empty array");
  std::vector<KernelPoint> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string rp = path + "/rows/" + std::to_string(i);
    const json& row = rows[i];
    if (!row.is_array() || row.size() != names.size()) r.fail(rp, "must have one number per column");
    auto at = [&](size_t c) { return r.positive(row[c], rp + "/" + std::to_string(c)); };
    KernelPoint p;
    double published_flops = 0;  // what the publisher divided by the time
    if (kind == "gemm") {
      const double m = at(need("m")), n = at(need("n")), k = at(need("k"));
      p.x = std::min({m, n, k});
      p.flops = published_flops = 2 * m * n * k;
    } else if (kind == "grouped_gemm") {
      const double rows_per_group = at(need("rows_per_group"));
      p.x = rows_per_group;
      p.flops = published_flops = 2 * rows_per_group * at(need("groups")) * at(need("n")) * at(need("k"));
    } else {
      const double seq = at(need("seq"));
      const double batch = tokens > 0 ? tokens / seq : batch_fixed > 0 ? batch_fixed : 1;
      const double pairs_published = seq * (causal ? seq / 2 : seq);
      const double pairs = seq * (causal ? (seq + 1) / 2 : seq);
      const double per_pair = 2 * batch * heads * (dqk + dv);
      p.x = seq;
      p.flops = per_pair * pairs * (backward ? 2 : 1);
      published_flops = per_pair * pairs_published * (backward ? counted : 1);
    }
    p.seconds = seconds_col ? at(*seconds_col) : published_flops / at(*throughput_col);
    out.push_back(p);
  }
  return out;
}

}  // namespace

std::vector<KernelPoint> CurveFitSpec::points() const {
  std::vector<KernelPoint> out;
  for (const KernelPointSet& s : sets) out.insert(out.end(), s.points.begin(), s.points.end());
  return out;
}

KernelPointsFile load_kernel_points(const InputText& input) {
  const json root = parse_json(input);
  const Reader r(input);
  r.object(root, "", {"format", "version", "doc", "sources", "fits", "constants"});
  if (r.text(root, "", "format") != "moesim-kernel-points") r.fail("/format", "must be \"moesim-kernel-points\"");
  if (r.positive(root, "", "version") != 1) r.fail("/version", "must be 1");
  KernelPointsFile out;

  const json& sources = r.member(root, "", "sources");
  if (!sources.is_object()) r.fail("/sources", "must be an object");
  for (const auto& [id, s] : sources.items()) {
    const std::string path = pointer_append("/sources", id);
    r.object(s, path, {"title", "url", "locator", "conditions"});
    out.sources[id] = {r.text(s, path, "title"), r.text(s, path, "url"), r.text(s, path, "locator"),
                       r.text(s, path, "conditions")};
  }
  auto known_source = [&](const json& j, const std::string& path) {
    std::string id = r.text(j, path, "source");
    if (!out.sources.contains(id)) r.fail(path + "/source", "names no entry of /sources: " + id);
    return id;
  };

  const json& fits = r.member(root, "", "fits");
  if (!fits.is_array()) r.fail("/fits", "must be an array");
  for (size_t i = 0; i < fits.size(); ++i) {
    const std::string path = "/fits/" + std::to_string(i);
    const json& f = r.object(fits[i], path, {"hardware", "curve", "dtype", "sets", "recorded"});
    CurveFitSpec spec;
    spec.hardware = r.text(f, path, "hardware");
    spec.curve = r.text(f, path, "curve");
    try {
      (void)curve_named(EfficiencySpec{}, spec.curve);
    } catch (const std::invalid_argument&) {
      r.fail(path + "/curve",
             "must be gemm, gemm_fp8, grouped_gemm, attention, attention_backward, linear_attention or "
             "attention_kernels.<flash1|flash2|flash3|cudnn>.<forward|backward>");
    }
    const auto dtype = enum_from_name<Dtype>(r.text(f, path, "dtype"));
    if (!dtype) r.fail(path + "/dtype", "unknown format");
    spec.dtype = *dtype;
    const json& sets = r.member(f, path, "sets");
    if (!sets.is_array() || sets.empty()) r.fail(path + "/sets", "must be a non-empty array");
    for (size_t k = 0; k < sets.size(); ++k) {
      const std::string sp = path + "/sets/" + std::to_string(k);
      const json& s = r.object(sets[k], sp,
                               {"source", "kind", "columns", "rows", "phase", "causal", "tokens", "batch", "heads",
                                "head_dim", "head_dim_v", "backward_flops_counted"});
      const std::string kind = r.text(s, sp, "kind");
      if (kind != "gemm" && kind != "grouped_gemm" && kind != "attention") {
        r.fail(sp + "/kind", "must be gemm, grouped_gemm or attention");
      }
      spec.sets.push_back({known_source(s, sp), read_points(r, s, sp, kind)});
    }
    if (f.contains("recorded")) {
      const std::string rp = path + "/recorded";
      const json& rec = r.object(f.at("recorded"), rp, {"rms_error", "max_abs_error"});
      RecordedFit rf;
      rf.rms_error = r.positive(rec, rp, "rms_error");
      rf.max_abs_error = r.positive(rec, rp, "max_abs_error");
      spec.recorded = rf;
    }
    out.fits.push_back(std::move(spec));
  }

  if (root.contains("constants")) {
    const json& cs = root.at("constants");
    if (!cs.is_array()) r.fail("/constants", "must be an array");
    for (size_t i = 0; i < cs.size(); ++i) {
      const std::string path = "/constants/" + std::to_string(i);
      const json& c = r.object(cs[i], path, {"hardware", "field", "value", "of", "source"});
      EfficiencyConstant k;
      k.hardware = r.text(c, path, "hardware");
      k.field = r.text(c, path, "field");
      if (!is_constant_field(k.field)) {
        r.fail(path + "/field", "must be collective, collective_scale_out, memory or memory_by_kind.<norm | activation | "
                                "elementwise | optimizer | dp_copy>");
      }
      k.source = known_source(c, path);
      k.value_bytes_per_s = r.bandwidth(c, path, "value");
      k.link_bytes_per_s = r.bandwidth(c, path, "of");
      if (k.value_bytes_per_s > k.link_bytes_per_s) r.fail(path + "/value", "exceeds the peak it is a fraction of ('of')");
      out.constants.push_back(k);
    }
  }
  return out;
}

std::optional<EfficiencyCurve> curve_named(const EfficiencySpec& e, std::string_view curve) {
  if (curve == "gemm") return e.gemm;
  if (curve == "gemm_fp8") return e.gemm_fp8;
  if (curve == "grouped_gemm") return e.grouped_gemm;
  if (curve == "attention") return e.attention;
  if (curve == "attention_backward") return e.attention_backward;
  if (curve == "linear_attention") return e.linear_attention;
  // A named attention kernel's curve: attention_kernels.<kernel>.forward | .backward.
  constexpr std::string_view prefix = "attention_kernels.";
  if (curve.starts_with(prefix)) {
    const std::string_view rest = curve.substr(prefix.size());
    const size_t dot = rest.find('.');
    const auto kernel = enum_from_name<AttentionKernel>(rest.substr(0, dot));
    const std::string_view phase = dot == std::string_view::npos ? "" : rest.substr(dot + 1);
    if (kernel && *kernel != AttentionKernel::platform_default && (phase == "forward" || phase == "backward")) {
      const AttentionKernelCurves* k = e.attention_kernels ? e.attention_kernels->of(*kernel) : nullptr;
      if (!k) return std::nullopt;
      return phase == "forward" ? std::optional<EfficiencyCurve>(k->forward) : k->backward;
    }
  }
  throw std::invalid_argument("curve_named: no curve " + std::string(curve));
}

double constant_named(const EfficiencySpec& e, std::string_view field) {
  if (field == "collective_scale_out") return e.collective_scale_out.value_or(e.collective);
  if (field == "collective") return e.collective;
  if (field == "memory") return e.memory;
  if (field.starts_with(kMemoryByKind)) {
    const std::optional<double> v = e.memory_by_kind ? e.memory_by_kind->of(field.substr(kMemoryByKind.size())) : std::nullopt;
    if (!v) throw std::invalid_argument("constant_named: the hardware has no " + std::string(field));
    return *v;
  }
  throw std::invalid_argument("constant_named: no field " + std::string(field));
}

}  // namespace moesim
