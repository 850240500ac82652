// SPDX-License-Identifier: MIT
#include "cost/calibration.hpp"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace moesim {

double CalibrationTable::at(double x) const {
  const auto& p = points_;
  if (p.empty()) return 0;
  if (!(x > p.front().first)) return p.front().second;  // also x <= 0 or NaN: the smallest point
  if (x >= p.back().first) return p.back().second;
  size_t hi = 1;
  while (p[hi].first < x) ++hi;  // tables have tens of points: a scan is fine
  const auto& [x0, y0] = p[hi - 1];
  const auto& [x1, y1] = p[hi];
  const double f = std::log(x / x0) / std::log(x1 / x0);
  return y0 + f * (y1 - y0);
}

const CalibrationTable* Calibration::collective(OpKind kind, int64_t n) const {
  auto it = busbw.find({kind, n});
  return it == busbw.end() ? nullptr : &it->second;
}

const CalibrationTable* Calibration::attention_table(OpKind kind, Phase phase) const {
  auto it = attention.find({kind, phase == Phase::bwd});
  return it == attention.end() ? nullptr : &it->second;
}

const CalibrationTable* Calibration::gemm_shape_table(GemmPass pass, int64_t n, int64_t k) const {
  auto it = gemm_shapes.find({pass, n, k});
  return it == gemm_shapes.end() ? nullptr : &it->second;
}

const CalibrationTable* Calibration::cce_table(const Op& op) const {
  if (op.kind != OpKind::cce_loss) return nullptr;
  auto it = cce.find(cce_pass_of(op));
  return it == cce.end() ? nullptr : &it->second;
}

const CalibrationTable* Calibration::memory_table(const Op& op) const {
  const bool bwd = op.phase == Phase::bwd;
  if (const int64_t width = memory_table_width(op); width > 0) {
    if (auto it = memory_by_kind.find({op.kind, width, bwd}); it != memory_by_kind.end()) return &it->second;
  }
  auto it = memory_by_kind.find({op.kind, 0, bwd});
  return it == memory_by_kind.end() ? nullptr : &it->second;
}

int64_t memory_table_width(const Op& op) { return op.kind == OpKind::norm ? op.k : 0; }

CcePass cce_pass_of(const Op& op) {
  if (op.phase != Phase::bwd) return CcePass::forward;  // recompute is the forward launch again
  return op.trainable_weight ? CcePass::backward : CcePass::backward_frozen;
}

bool is_calibrated_attention_kind(OpKind kind) {
  return kind == OpKind::flash_attention || kind == OpKind::sparse_attention || kind == OpKind::dsa_indexer ||
         kind == OpKind::indexer_score || kind == OpKind::kda || kind == OpKind::kv_gather;
}

bool attention_table_counts_bytes(OpKind kind) { return kind == OpKind::kv_gather; }

bool is_memory_bound_kind(OpKind kind) {
  using K = OpKind;
  return kind == K::embedding || kind == K::norm || kind == K::activation || kind == K::elementwise ||
         kind == K::short_conv || kind == K::permute || kind == K::unpermute || kind == K::kda_gate_cumsum ||
         kind == K::topk || kind == K::attention_residual || kind == K::cross_entropy || kind == K::optimizer ||
         kind == K::grad_accumulate || kind == K::dp_copy;
}

namespace {

using nlohmann::json;

// Version 2 added the optional "attention" tables, version 3 the optional "memory_overhead" (read
// by the hardware loader, hardware_spec.cpp), version 4 the optional "collectives_inter_node",
// version 5 the optional "kernels/memory_by_kind", version 6 its tables of one row width
// ("norm:128"), version 7 the optional "kernels/gemm_shapes"; every older version is still read.
constexpr int kFormatVersion = 7;
constexpr int kOldestVersion = 1;

// A key's whole number from 1 to 999,999,999 (the digits of "norm:128", "4096:2048"), or 0.
int64_t whole_number(const std::string& digits) {
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(digits);
}

struct Reader {
  const std::string& file;

  [[noreturn]] void fail(const std::string& path, const std::string& msg) const { throw InputError(file, path, msg); }

  const json& object(const json& j, const std::string& path) const {
    if (!j.is_object()) fail(path, "must be an object");
    return j;
  }

  void only_keys(const json& j, const std::string& path, const std::set<std::string>& allowed) const {
    for (const auto& [key, value] : j.items()) {
      (void)value;
      if (!allowed.contains(key)) {
        std::string known;
        for (const auto& k : allowed) known += (known.empty() ? "" : ", ") + k;
        fail(pointer_append(path, key), "unknown key (known: " + known + ")");
      }
    }
  }

  // {"measure": M, "value": V, "points": [[x, y], ...], "samples": [...], "dtype": "bf16"}
  CalibrationTable table(const json& j, const std::string& path, const std::string& measure,
                         const std::string& value, const std::set<std::string>& more_keys = {}) const {
    object(j, path);
    std::set<std::string> keys{"measure", "value", "points", "samples", "dtype"};
    keys.insert(more_keys.begin(), more_keys.end());
    only_keys(j, path, keys);
    const auto expect = [&](const char* key, const std::string& want) {
      if (!j.contains(key)) fail(path, std::string("missing \"") + key + "\"");
      if (!j[key].is_string() || j[key].get<std::string>() != want) {
        fail(pointer_append(path, key), "must be \"" + want + "\"");
      }
    };
    expect("measure", measure);
    expect("value", value);
    if (j.contains("dtype")) expect("dtype", "bf16");
    if (!j.contains("points")) fail(path, "missing \"points\"");
    const json& pts = j["points"];
    const std::string pp = pointer_append(path, "points");
    if (!pts.is_array() || pts.empty()) fail(pp, "must be a non-empty array of [x, y] pairs");
    std::vector<std::pair<double, double>> out;
    for (size_t i = 0; i < pts.size(); ++i) {
      const std::string ip = pp + "/" + std::to_string(i);
      const json& p = pts[i];
      if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) fail(ip, "must be [x, y] (numbers)");
      const double x = p[0].get<double>();
      const double y = p[1].get<double>();
      if (!(x > 0) || !std::isfinite(x)) fail(ip + "/0", "the measure must be positive and finite");
      if (!(y > 0) || !std::isfinite(y)) fail(ip + "/1", "the value must be positive and finite");
      if (!out.empty() && !(x > out.back().first)) fail(ip + "/0", "measures must increase strictly");
      out.emplace_back(x, y);
    }
    return CalibrationTable(std::move(out));
  }

  // The op kind `name` (at `path`), which must be one `accepted` names (`what` in the error, with
  // those kinds listed).
  OpKind accepted_kind(const std::string& name, const std::string& path, const char* what, bool (*accepted)(OpKind)) const {
    const auto kind = enum_from_name<OpKind>(name);
    if (!kind || !accepted(*kind)) {
      std::string known;
      for (const auto& [n, k] : EnumNames<OpKind>::names) {
        if (accepted(k)) known += (known.empty() ? "" : ", ") + std::string(n);
      }
      fail(path, std::string("unknown ") + what + " op kind (known: " + known + ")");
    }
    return *kind;
  }

  // {"forward": table, "backward": table} at `path`: (backward?, table) per phase present.
  std::vector<std::pair<bool, CalibrationTable>> pass_tables(const json& phases, const std::string& path,
                                                             const std::string& measure, const std::string& value) const {
    object(phases, path);
    only_keys(phases, path, {"forward", "backward"});
    std::vector<std::pair<bool, CalibrationTable>> out;
    for (const auto& [phase, t] : phases.items()) {
      out.emplace_back(phase == "backward", table(t, pointer_append(path, phase), measure, value));
    }
    return out;
  }

  // {"KIND": {"forward": table, "backward": table}} into `out` by (kind, backward?): tables of the
  // op kinds `accepted` names, by `measure`, in the unit value_of(kind) names.
  template <class ValueOf>
  void kind_pass_tables(const json& j, const std::string& path, const char* what, bool (*accepted)(OpKind),
                        const std::string& measure, ValueOf value_of,
                        std::map<std::pair<OpKind, bool>, CalibrationTable>& out) const {
    object(j, path);
    for (const auto& [name, phases] : j.items()) {
      const std::string kind_path = pointer_append(path, name);
      const OpKind kind = accepted_kind(name, kind_path, what, accepted);
      for (auto& [backward, t] : pass_tables(phases, kind_path, measure, value_of(kind))) out[{kind, backward}] = std::move(t);
    }
  }
};

}  // namespace

Calibration load_calibration(const InputText& input) { return load_calibration(input, parse_json(input)); }

Calibration load_calibration(const InputText& input, const json& root) {
  const Reader r{input.name};
  r.object(root, "");
  // Format and version first (the keys allowed depend on the version), read without narrowing:
  // 2^32 + 3 is not version 3.
  if (!root.contains("format") || root["format"] != "moesim-calibration") {
    r.fail("/format", "must be \"moesim-calibration\"");
  }
  if (!root.contains("version")) r.fail("/version", "missing required key");
  const json& version_json = root["version"];
  const bool in_range = version_json.is_number_unsigned()
                            ? version_json.get<uint64_t>() >= kOldestVersion && version_json.get<uint64_t>() <= kFormatVersion
                            : version_json.is_number_integer() && version_json.get<int64_t>() >= kOldestVersion &&
                                  version_json.get<int64_t>() <= kFormatVersion;
  if (!version_json.is_number_integer()) r.fail("/version", "must be an integer, got " + version_json.dump().substr(0, 40));
  if (!in_range) {
    r.fail("/version", "unsupported version " + version_json.dump() + " (this moesim reads versions " +
                           std::to_string(kOldestVersion) + " to " + std::to_string(kFormatVersion) + ")");
  }
  const auto version = static_cast<int>(version_json.get<int64_t>());
  std::set<std::string> keys{"format", "version", "provenance", "kernels", "other_kernels", "host_copy", "collectives"};
  if (version >= 2) keys.insert("attention");
  if (version >= 3) keys.insert("memory_overhead");
  if (version >= 4) keys.insert("collectives_inter_node");
  r.only_keys(root, "", keys);
  Calibration c;
  c.file = input.name;
  if (root.contains("kernels")) {
    const json& k = r.object(root["kernels"], "/kernels");
    std::set<std::string> kernel_keys{"gemm", "grouped_gemm", "memory", "cce"};
    if (version >= 5) kernel_keys.insert("memory_by_kind");
    if (version >= 7) kernel_keys.insert("gemm_shapes");
    r.only_keys(k, "/kernels", kernel_keys);
    if (k.contains("gemm")) c.gemm_flops_per_s = r.table(k["gemm"], "/kernels/gemm", "min_mnk", "flops_per_s");
    if (k.contains("grouped_gemm")) {
      c.grouped_gemm_flops_per_s = r.table(k["grouped_gemm"], "/kernels/grouped_gemm", "rows_per_group", "flops_per_s");
    }
    if (k.contains("memory")) c.memory_bytes_per_s = r.table(k["memory"], "/kernels/memory", "bytes", "bytes_per_s");
    if (k.contains("cce")) {
      // {"forward": table, "backward": table, "backward_frozen": table}: FLOP/s by hidden size.
      const json& passes = r.object(k["cce"], "/kernels/cce");
      r.only_keys(passes, "/kernels/cce", {"forward", "backward", "backward_frozen"});
      for (const auto& [name, t] : passes.items()) {
        c.cce[*enum_from_name<CcePass>(name)] = r.table(t, pointer_append("/kernels/cce", name), "hidden_size", "flops_per_s");
      }
    }
    if (k.contains("gemm_shapes")) {
      // {"PASS": {"N:K": table}}: FLOP/s by the layer's tokens m, per pass and layer width.
      const std::string top = "/kernels/gemm_shapes";
      for (const auto& [name, shapes] : r.object(k["gemm_shapes"], top).items()) {
        const std::string path = pointer_append(top, name);
        const auto pass = enum_from_name<GemmPass>(name);
        if (!pass) r.fail(path, "unknown pass (known: forward, input_grad, weight_grad)");
        for (const auto& [key, t] : r.object(shapes, path).items()) {
          const std::string shape_path = pointer_append(path, key);
          const size_t colon = key.find(':');
          const int64_t n = colon == std::string::npos ? 0 : whole_number(key.substr(0, colon));
          const int64_t kk = colon == std::string::npos ? 0 : whole_number(key.substr(colon + 1));
          if (n <= 0 || kk <= 0) r.fail(shape_path, "a layer's shape is N:K, two whole numbers from 1 to 999999999");
          c.gemm_shapes[{*pass, n, kk}] = r.table(t, shape_path, "tokens", "flops_per_s");
        }
      }
    }
    if (k.contains("memory_by_kind")) {
      // {"KIND" or "norm:WIDTH": {"forward": table, "backward": table}}: bytes/s by bytes moved.
      const std::string top = "/kernels/memory_by_kind";
      for (const auto& [key, phases] : r.object(k["memory_by_kind"], top).items()) {
        const std::string path = pointer_append(top, key);
        const size_t colon = key.find(':');
        int64_t width = 0;  // the kind's table of every width
        if (colon != std::string::npos) {
          if (version < 6) r.fail(path, "a table of one row width (KIND:WIDTH) needs format version 6");
          width = whole_number(key.substr(colon + 1));
          if (width == 0) r.fail(path, "the row width after ':' must be a whole number from 1 to 999999999");
          if (key.substr(0, colon) != "norm") r.fail(path, "only norm tables have a row width (norm:WIDTH)");
        }
        const OpKind kind = r.accepted_kind(key.substr(0, colon), path, "memory-bound", is_memory_bound_kind);
        for (auto& [backward, t] : r.pass_tables(phases, path, "bytes", "bytes_per_s")) {
          c.memory_by_kind[{kind, width, backward}] = std::move(t);
        }
      }
    }
  }
  if (root.contains("host_copy")) {
    const json& h = r.object(root["host_copy"], "/host_copy");
    r.only_keys(h, "/host_copy", {"h2d", "d2h"});
    if (h.contains("h2d")) c.h2d_bytes_per_s = r.table(h["h2d"], "/host_copy/h2d", "bytes", "bytes_per_s");
    if (h.contains("d2h")) c.d2h_bytes_per_s = r.table(h["d2h"], "/host_copy/d2h", "bytes", "bytes_per_s");
  }
  // {"KIND": {"N": table}}, N the group size; across nodes each table also says how the group spans them.
  const auto read_collectives = [&](const char* key, bool inter_node) {
    if (!root.contains(key)) return;
    const std::string top = std::string("/") + key;
    const json& col = r.object(root[key], top);
    for (const auto& [name, groups] : col.items()) {
      const std::string path = pointer_append(top, name);
      const auto kind = enum_from_name<OpKind>(name);
      if (!kind || !is_collective(*kind)) {
        r.fail(path, "unknown collective (known: all_gather, reduce_scatter, all_reduce, all_to_all)");
      }
      r.object(groups, path);
      for (const auto& [size, t] : groups.items()) {
        const std::string gp = pointer_append(path, size);
        int64_t n = 0;
        try {
          size_t used = 0;
          n = std::stoll(size, &used);
          if (used != size.size()) n = 0;
        } catch (const std::exception&) {
          n = 0;
        }
        if (n < 2 || n > limits::kMaxDevices) {
          r.fail(gp, "group sizes are integers >= 2 and at most " + std::to_string(limits::kMaxDevices));
        }
        if (!inter_node) {
          c.busbw[{*kind, n}] = r.table(t, gp, "bytes", "busbw_bytes_per_s");
          continue;
        }
        Calibration::InterNodeTable it;
        it.busbw = r.table(t, gp, "bytes", "busbw_bytes_per_s", {"nodes", "ranks_per_node"});
        const json& tj = t;  // a structured binding cannot be captured by clang 14's lambdas
        const auto count = [&](const char* field) -> int64_t {
          const std::string fp = pointer_append(gp, field);
          if (!tj.contains(field)) r.fail(gp, std::string("missing \"") + field + "\"");
          if (!tj[field].is_number_integer() || tj[field].get<int64_t>() < 1) r.fail(fp, "must be a positive integer");
          return tj[field].get<int64_t>();
        };
        it.nodes = count("nodes");
        it.ranks_per_node = count("ranks_per_node");
        if (it.nodes < 2) r.fail(pointer_append(gp, "nodes"), "a group across nodes spans at least 2");
        if (it.nodes * it.ranks_per_node != n) {
          r.fail(gp, "nodes x ranks_per_node (" + std::to_string(it.nodes) + " x " + std::to_string(it.ranks_per_node) +
                         ") must be the group size " + std::to_string(n));
        }
        c.busbw_inter_node[{*kind, n}] = std::move(it);
      }
    }
  };
  read_collectives("collectives", false);
  read_collectives("collectives_inter_node", true);
  if (root.contains("attention")) {
    // FLOP/s by query rows (bytes/s for the memory-bound DSA key gather).
    r.kind_pass_tables(root["attention"], "/attention", "attention", is_calibrated_attention_kind, "query_rows",
                       [](OpKind kind) { return attention_table_counts_bytes(kind) ? "bytes_per_s" : "flops_per_s"; },
                       c.attention);
  }
  return c;
}

}  // namespace moesim
