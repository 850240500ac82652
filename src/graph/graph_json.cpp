// SPDX-License-Identifier: MIT
// StepGraph <-> JSON ("moesim-graph" version 1); the format is specified in docs/graph-format.md.
//
// Writing composes the text by hand, one op / buffer / name per line, so that the file diffs and
// greps well; every number and string is still printed by nlohmann::json, whose doubles are the
// shortest text that parses back to the same bits. Reading is strict: each object is checked for
// missing and unknown keys, each value for its type and range, each index against what it points
// into, and errors name the JSON path. Paths are built only when an error is thrown (Where is a
// chain of stack frames), which keeps the reader cheap on graphs of a few hundred thousand ops.
#include "graph/graph_json.hpp"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/fields.hpp"
#include "core/json_input.hpp"
#include "core/limits.hpp"

namespace moesim {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "moesim-graph";
constexpr int64_t kVersion = 1;

// ---------------------------------------------------------------------------------------------
// Writing

class Writer {
 public:
  std::string& text() { return out_; }

  void raw(std::string_view s) { out_ += s; }
  void number(int64_t v) { out_ += std::to_string(v); }
  // Shortest round-trip text ("4096.0", "1.5e-07"); JSON has no NaN or infinity, and nlohmann
  // would print them as null, so they are a builder bug rather than something to write.
  void number(double v, std::string_view what) {
    if (!std::isfinite(v)) throw std::logic_error("export_graph_json: non-finite " + std::string(what));
    out_ += json(v).dump();
  }
  void string(std::string_view s) { out_ += json(s).dump(); }
  template <class E>
  void name(E value) {
    out_ += '"';
    out_ += enum_name(value);
    out_ += '"';
  }
  // `"key":` preceded by a comma unless it is the first member of the current object.
  Writer& key(std::string_view k, bool& first) {
    if (!first) out_ += ',';
    first = false;
    out_ += '"';
    out_ += k;
    out_ += "\":";
    return *this;
  }

 private:
  std::string out_;
};

void write_tensor(Writer& w, const TensorDesc& t) {
  // Dimensions up to the last non-zero one: the trailing zeros are the unused ones, and an
  // interior zero (not produced today) is kept so the shape comes back exactly.
  size_t num_dims = t.shape.size();
  while (num_dims > 0 && t.shape[num_dims - 1] == 0) --num_dims;
  w.raw("[");
  for (size_t d = 0; d < num_dims; ++d) {
    w.number(t.shape[d]);
    w.raw(",");
  }
  w.name(t.dtype);
  w.raw("]");
}

void write_tensors(Writer& w, std::string_view key, std::span<const TensorDesc> tensors, bool& first) {
  if (tensors.empty()) return;
  w.key(key, first);
  w.raw("[");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0) w.raw(",");
    write_tensor(w, tensors[i]);
  }
  w.raw("]");
}

// One op on one line. kind, name, phase, stream, layer and micro are always written, group for
// every communication op and peer for every send / recv; everything else only when it differs
// from Op's default, which the reader restores.
void write_op(Writer& w, const Program& p, const Op& op) {
  const Op d;  // defaults
  bool first = true;
  w.raw("{");
  w.key("kind", first).name(op.kind);
  w.key("name", first).number(int64_t{op.name});
  w.key("phase", first).name(op.phase);
  w.key("stream", first).name(op.stream);
  if (op.dtype != d.dtype) w.key("dtype", first).name(op.dtype);
  if (is_communication(op.kind) || op.group != d.group) w.key("group", first).name(op.group);
  if (is_p2p(op.kind) || op.peer_offset != d.peer_offset) w.key("peer", first).number(int64_t{op.peer_offset});
  w.key("layer", first).number(int64_t{op.layer});
  w.key("micro", first).number(int64_t{op.micro});
  if (op.routing_layer != d.routing_layer) w.key("routing_layer", first).number(int64_t{op.routing_layer});
  if (op.routing_part != d.routing_part) w.key("routing_part", first).name(op.routing_part);
  if (op.trainable_weight != d.trainable_weight) w.key("trainable", first).raw(op.trainable_weight ? "true" : "false");
  auto amount = [&](std::string_view key, double v) {
    if (v != 0) w.key(key, first).number(v, key);
  };
  amount("flops", op.flops);
  amount("bytes_read", op.bytes_read);
  amount("bytes_written", op.bytes_written);
  amount("cast_bytes", op.cast_bytes);
  amount("comm_bytes", op.comm_bytes);
  if (op.m != d.m) w.key("m", first).number(op.m);
  if (op.n != d.n) w.key("n", first).number(op.n);
  if (op.k != d.k) w.key("k", first).number(op.k);
  if (op.num_groups != d.num_groups) w.key("num_groups", first).number(int64_t{op.num_groups});
  if (op.num_kernels != d.num_kernels) w.key("kernels", first).number(int64_t{op.num_kernels});
  write_tensors(w, "in", p.inputs(op), first);
  write_tensors(w, "out", p.outputs(op), first);
  if (op.num_effects > 0) {
    w.key("effects", first);
    w.raw("[");
    bool first_effect = true;
    for (const MemEffect& e : p.effects_of(op)) {
      if (!first_effect) w.raw(",");
      first_effect = false;
      w.raw("[");
      w.number(int64_t{e.buffer});
      w.raw(",");
      w.name(e.action);
      w.raw("]");
    }
    w.raw("]");
  }
  if (op.num_deps > 0) {
    w.key("deps", first);
    w.raw("[");
    bool first_dep = true;
    for (uint32_t dep : p.deps_of(op)) {
      if (!first_dep) w.raw(",");
      first_dep = false;
      w.number(int64_t{dep});
    }
    w.raw("]");
  }
  w.raw("}");
}

// The format lists each op's tensors, effects and deps with the op; the program's flat arrays are
// rebuilt by concatenation. That is exact only for ProgramWriter's layout, checked here.
void check_layout(const Program& p) {
  uint64_t tensors = 0;
  uint64_t effects = 0;
  uint64_t deps = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.first_tensor != tensors || op.first_effect != effects || op.first_dep != deps) {
      throw std::logic_error("export_graph_json: program " + std::to_string(p.stage) + " op " + std::to_string(i) +
                             ": tensor, effect or dependency range is not contiguous with the previous op's");
    }
    tensors += uint64_t{op.num_inputs} + op.num_outputs;
    effects += op.num_effects;
    deps += op.num_deps;
  }
  if (tensors != p.tensors.size() || effects != p.effects.size() || deps != p.deps.size()) {
    throw std::logic_error("export_graph_json: program " + std::to_string(p.stage) +
                           " has tensors, effects or dependencies that no op refers to");
  }
}

void write_program(Writer& w, const Program& p) {
  check_layout(p);
  w.raw("    {\n      \"stage\": ");
  w.number(p.stage);
  w.raw(",\n      \"persistent\": {");
  bool first = true;
  auto state = [&](std::string_view key, double bytes) {
    w.raw(first ? "\"" : ", \"");
    first = false;
    w.raw(key);
    w.raw("\": ");
    w.number(bytes, "persistent " + std::string(key));
  };
  const PersistentMemory& m = p.persistent;
  state("params", m.params);
  state("master_params", m.master_params);
  state("grads", m.grads);
  state("optimizer_states", m.optimizer_states);
  state("runtime", m.runtime);
  if (m.host_total() > 0) {  // CPU offload's state in host memory; absent when none
    state("host_params", m.host_params);
    state("host_master_params", m.host_master_params);
    state("host_grads", m.host_grads);
    state("host_optimizer_states", m.host_optimizer_states);
  }
  w.raw("},\n      \"names\": [");
  for (size_t i = 0; i < p.names.size(); ++i) {
    w.raw(i == 0 ? "\n        " : ",\n        ");
    w.string(p.names[i]);
  }
  w.raw(p.names.empty() ? "],\n" : "\n      ],\n");
  w.raw("      \"buffers\": [");
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    w.raw(i == 0 ? "\n        {\"name\": " : ",\n        {\"name\": ");
    w.number(int64_t{b.name});
    w.raw(", \"category\": ");
    w.name(b.category);
    w.raw(", \"bytes\": ");
    w.number(b.bytes, "buffer bytes");
    w.raw("}");
  }
  w.raw(p.buffers.empty() ? "],\n" : "\n      ],\n");
  w.raw("      \"ops\": [");
  for (size_t i = 0; i < p.ops.size(); ++i) {
    w.raw(i == 0 ? "\n        " : ",\n        ");
    write_op(w, p, p.ops[i]);
  }
  w.raw(p.ops.empty() ? "]\n" : "\n      ]\n");
  w.raw("    }");
}

// The routing block: the sampler's spec and sizes, enough to rebuild the same sampler.
void write_routing(Writer& w, const std::optional<RoutingSampler>& routing) {
  if (!routing) {
    w.raw("null");
    return;
  }
  const RoutingSpec& spec = routing->spec();
  w.raw("{\"num_experts\": ");
  w.number(routing->num_experts());
  w.raw(", \"top_k\": ");
  w.number(routing->top_k());
  w.raw(", \"ep\": ");
  w.number(routing->ep());
  w.raw(", \"distribution\": ");
  w.string(enum_name(spec.distribution));
  w.raw(", \"skew\": ");
  w.number(spec.skew, "routing skew");
  w.raw(", \"seed\": ");
  w.number(spec.seed);
  w.raw(", \"num_sampled_steps\": ");
  w.number(spec.num_sampled_steps);
  w.raw(", \"histogram_file\": ");
  w.string(spec.histogram);
  if (spec.groups != 1 || spec.groups_per_token != 0) {  // written only when routing is group-limited
    w.raw(", \"groups\": ");
    w.number(spec.groups);
    w.raw(", \"groups_per_token\": ");
    w.number(spec.groups_per_token);
  }
  // The other routing switches, each written only when set (docs/graph-format.md).
  if (spec.nodes_per_token != 0) {
    w.raw(", \"nodes_per_token\": ");
    w.number(spec.nodes_per_token);
  }
  if (routing->ep_ranks_per_node() != routing->ep()) {
    w.raw(", \"ep_ranks_per_node\": ");
    w.number(routing->ep_ranks_per_node());
  }
  if (spec.devices_per_token != 0) {
    w.raw(", \"devices_per_token\": ");
    w.number(spec.devices_per_token);
  }
  if (spec.capacity_factor) {
    w.raw(", \"capacity_factor\": ");
    w.number(*spec.capacity_factor, "routing capacity factor");
    w.raw(", \"capacity_policy\": ");
    w.string(enum_name(spec.capacity_policy));
  }
  if (spec.bias_update_speed != 0) {
    w.raw(", \"bias_update_speed\": ");
    w.number(spec.bias_update_speed, "routing bias update speed");
  }
  if (spec.bias_start_step != 0) {
    w.raw(", \"bias_start_step\": ");
    w.number(spec.bias_start_step);
  }
  if (!routing->histogram().empty()) {
    w.raw(", \"histogram\": [");
    for (size_t i = 0; i < routing->histogram().size(); ++i) {
      if (i > 0) w.raw(", ");
      w.number(routing->histogram()[i], "routing histogram");
    }
    w.raw("]");
  }
  w.raw("}");
}

// ---------------------------------------------------------------------------------------------
// Reading

// Where a value sits: a chain of (parent, key or index) frames on the stack, turned into a JSON
// pointer only for an error message.
struct Where {
  const Where* parent = nullptr;
  std::string_view key;
  int64_t index = -1;  // >= 0: an array element

  Where at(std::string_view k) const { return Where{this, k, -1}; }
  Where at(size_t i) const { return Where{this, {}, static_cast<int64_t>(i)}; }
  std::string str() const {
    if (parent == nullptr) return "";
    std::string out = parent->str();
    return index >= 0 ? out + "/" + std::to_string(index) : pointer_append(out, key);
  }
};

class Reader {
 public:
  explicit Reader(const std::string& file) : file_(file) {}

  [[noreturn]] void fail(const Where& where, const std::string& message) const {
    const std::string path = where.str();
    throw InputError(file_, path.empty() ? "/" : path, message);
  }
  [[noreturn]] void type_error(const Where& where, const json& j, std::string_view expected) const {
    fail(where, "expected " + std::string(expected) + ", got " + detail::json_type_name(j) + " " + detail::short_dump(j));
  }

  int64_t integer(const json& j, const Where& where, int64_t min, int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!j.is_number_integer()) type_error(where, j, "an integer");
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(where, "integer " + j.dump() + " is too large");
    }
    const auto v = j.get<int64_t>();
    if (v < min || v > max) {
      const std::string got = ", got " + std::to_string(v);
      if (max == std::numeric_limits<int64_t>::max()) fail(where, "must be at least " + std::to_string(min) + got);
      fail(where, "must be between " + std::to_string(min) + " and " + std::to_string(max) + got);
    }
    return v;
  }
  // An index into a table of `size` entries.
  uint32_t index(const json& j, const Where& where, size_t size, std::string_view table) const {
    const int64_t v = integer(j, where, 0);
    if (static_cast<uint64_t>(v) >= size) {
      fail(where, "index " + std::to_string(v) + " is out of range: the program has " + std::to_string(size) + " " +
                      std::string(table));
    }
    return static_cast<uint32_t>(v);
  }
  // Sizes, FLOPs and bytes: finite (JSON has no other kind), not negative and at most `max`.
  double amount(const json& j, const Where& where, double max) const {
    if (!j.is_number()) type_error(where, j, "a number");
    const auto v = j.get<double>();
    if (!(v >= 0)) fail(where, "must be at least 0, got " + j.dump());
    if (v > max) {
      fail(where, "must be between 0 and " + detail::format_number(max) + " (moesim's limit, docs/limits.md), got " +
                      j.dump());
    }
    return v;
  }
  double bytes(const json& j, const Where& where) const { return amount(j, where, limits::kMaxBytes); }
  // A count of entries of one program (ops, names, buffers, tensors, effects, dependencies).
  void entries(size_t count, const Where& where, std::string_view what) const {
    if (count > static_cast<size_t>(limits::kMaxProgramEntries)) {
      fail(where, "more than " + std::to_string(limits::kMaxProgramEntries) + " " + std::string(what) +
                      " in one program (moesim's limit, docs/limits.md)");
    }
  }
  std::string string(const json& j, const Where& where) const {
    if (!j.is_string()) type_error(where, j, "a string");
    return j.get<std::string>();
  }
  bool boolean(const json& j, const Where& where) const {
    if (!j.is_boolean()) type_error(where, j, "true or false");
    return j.get<bool>();
  }
  template <class E>
  E name(const json& j, const Where& where) const {
    if (!j.is_string()) type_error(where, j, "one of " + enum_choices<E>());
    const auto* s = j.get_ptr<const json::string_t*>();
    auto v = enum_from_name<E>(*s);
    if (!v) fail(where, "'" + *s + "' is not one of " + enum_choices<E>());
    return *v;
  }
  const json& array(const json& j, const Where& where) const {
    if (!j.is_array()) type_error(where, j, "an array");
    return j;
  }

 private:
  const std::string& file_;
};

// A JSON object read key by key; finish() rejects the keys nobody asked for.
class Object {
 public:
  Object(const Reader& r, const json& node, const Where& where) : r_(r), node_(node), where_(where) {
    if (!node.is_object()) r.type_error(where, node, "an object");
  }

  const json* find(std::string_view key) {
    auto it = node_.find(key);
    if (it == node_.end()) return nullptr;
    ++num_found_;
    return &*it;
  }
  const json& need(std::string_view key) {
    const json* j = find(key);
    if (j == nullptr) r_.fail(where_.at(key), "missing required key");
    return *j;
  }
  // Every key found was a distinct known one, so a count tells whether any are left over; only
  // then are the keys compared, against the full list of known ones.
  void finish(std::initializer_list<std::string_view> known) const {
    if (num_found_ == node_.size()) return;
    for (const auto& [key, value] : node_.items()) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || k == key;
      if (!ok) r_.fail(where_.at(key), "unknown key (see docs/graph-format.md)");
    }
  }
  const Where& where() const { return where_; }

 private:
  const Reader& r_;
  const json& node_;
  const Where& where_;
  size_t num_found_ = 0;
};

TensorDesc read_tensor(const Reader& r, const json& j, const Where& where) {
  r.array(j, where);
  const size_t size = j.size();
  if (size < 1 || size > 5) r.fail(where, "expected [dims..., dtype] with 0 to 4 dimensions, got " + detail::short_dump(j));
  TensorDesc t;
  int64_t elements = 1;  // as TensorDesc::num_elements counts them: zero dimensions are unused
  for (size_t d = 0; d + 1 < size; ++d) {
    t.shape[d] = r.integer(j[d], where.at(d), 0, limits::kMaxTensorElements);
    if (t.shape[d] > 0) elements = limits::checked_mul(elements, t.shape[d]).value_or(limits::kMaxTensorElements + 1);
    if (elements > limits::kMaxTensorElements) {
      r.fail(where, "has more than " + std::to_string(limits::kMaxTensorElements) +
                        " elements (moesim's limit, docs/limits.md): " + detail::short_dump(j));
    }
  }
  t.dtype = r.name<Dtype>(j[size - 1], where.at(size - 1));
  return t;
}

void read_tensors(const Reader& r, Object& o, std::string_view key, Program& p, uint16_t& count) {
  const json* j = o.find(key);
  if (j == nullptr) return;
  const Where where = o.where().at(key);
  r.array(*j, where);
  if (j->size() > std::numeric_limits<uint16_t>::max()) r.fail(where, "more than 65535 tensors");
  r.entries(p.tensors.size() + j->size(), where, "tensors");
  count = static_cast<uint16_t>(j->size());
  for (size_t i = 0; i < j->size(); ++i) p.tensors.push_back(read_tensor(r, (*j)[i], where.at(i)));
}

void read_op(const Reader& r, const json& node, const Where& where, Program& p) {
  const auto self = static_cast<uint32_t>(p.ops.size());
  Object o(r, node, where);
  Op op;
  auto optional_int = [&](std::string_view key, auto& out, int64_t min, int64_t max) {
    using T = std::remove_reference_t<decltype(out)>;
    if (const json* j = o.find(key)) out = static_cast<T>(r.integer(*j, where.at(key), min, max));
  };
  auto optional_amount = [&](std::string_view key, double& out, double max) {
    if (const json* j = o.find(key)) out = r.amount(*j, where.at(key), max);
  };
  op.kind = r.name<OpKind>(o.need("kind"), where.at("kind"));
  op.name = r.index(o.need("name"), where.at("name"), p.names.size(), "names");
  op.phase = r.name<Phase>(o.need("phase"), where.at("phase"));
  op.stream = r.name<Stream>(o.need("stream"), where.at("stream"));
  if (const json* j = o.find("dtype")) op.dtype = r.name<Dtype>(*j, where.at("dtype"));
  if (const json* j = o.find("group")) op.group = r.name<GroupKind>(*j, where.at("group"));
  optional_int("peer", op.peer_offset, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  // Layers 1..L with 0 the embedding and L + 1 the head; micro-batches from 0, -1 per step.
  op.layer = static_cast<int32_t>(r.integer(o.need("layer"), where.at("layer"), 0, limits::kMaxLayers + 1));
  op.micro = static_cast<int32_t>(r.integer(o.need("micro"), where.at("micro"), -1, limits::kMaxMicroBatches - 1));
  optional_int("routing_layer", op.routing_layer, -1, limits::kMaxLayers);
  if (const json* j = o.find("routing_part")) op.routing_part = r.name<RoutingPart>(*j, where.at("routing_part"));
  if (const json* j = o.find("trainable")) op.trainable_weight = r.boolean(*j, where.at("trainable"));
  optional_amount("flops", op.flops, limits::kMaxOpFlops);
  optional_amount("bytes_read", op.bytes_read, limits::kMaxBytes);
  optional_amount("bytes_written", op.bytes_written, limits::kMaxBytes);
  optional_amount("cast_bytes", op.cast_bytes, limits::kMaxBytes);
  optional_amount("comm_bytes", op.comm_bytes, limits::kMaxBytes);
  optional_int("m", op.m, 0, limits::kMaxTensorElements);
  optional_int("n", op.n, 0, limits::kMaxTensorElements);
  optional_int("k", op.k, 0, limits::kMaxTensorElements);
  optional_int("num_groups", op.num_groups, 0, limits::kMaxExperts);
  optional_int("kernels", op.num_kernels, 1, 4096);  // kernels one op launches (eager decompositions: tens)

  op.first_tensor = static_cast<uint32_t>(p.tensors.size());
  read_tensors(r, o, "in", p, op.num_inputs);
  read_tensors(r, o, "out", p, op.num_outputs);

  op.first_effect = static_cast<uint32_t>(p.effects.size());
  if (const json* j = o.find("effects")) {
    const Where list = where.at("effects");
    r.array(*j, list);
    r.entries(p.effects.size() + j->size(), list, "memory effects");
    for (size_t i = 0; i < j->size(); ++i) {
      const json& e = (*j)[i];
      const Where at = list.at(i);
      r.array(e, at);
      if (e.size() != 2) r.fail(at, "expected [buffer, action], got " + detail::short_dump(e));
      p.effects.push_back(MemEffect{r.index(e[0], at.at(size_t{0}), p.buffers.size(), "buffers"),
                                    r.name<MemAction>(e[1], at.at(size_t{1}))});
    }
    op.num_effects = static_cast<uint32_t>(j->size());
  }

  op.first_dep = static_cast<uint32_t>(p.deps.size());
  if (const json* j = o.find("deps")) {
    const Where list = where.at("deps");
    r.array(*j, list);
    r.entries(p.deps.size() + j->size(), list, "dependencies");
    for (size_t i = 0; i < j->size(); ++i) {
      const Where at = list.at(i);
      const int64_t dep = r.integer((*j)[i], at, 0);
      if (dep >= self) {
        r.fail(at, "dependency " + std::to_string(dep) + " does not point to an earlier op (this is op " +
                       std::to_string(self) + ")");
      }
      p.deps.push_back(static_cast<uint32_t>(dep));
    }
    op.num_deps = static_cast<uint32_t>(j->size());
  }
  o.finish({"kind", "name", "phase", "stream", "dtype", "group", "peer", "layer", "micro", "routing_layer",
            "routing_part", "trainable", "flops", "bytes_read", "bytes_written", "comm_bytes", "m", "n", "k", "num_groups", "kernels", "in",
            "out", "effects", "deps"});
  p.ops.push_back(op);
}

Program read_program(const Reader& r, const json& node, const Where& where, size_t expected_stage) {
  Object o(r, node, where);
  Program p;
  const Where stage_at = where.at("stage");
  p.stage = r.integer(o.need("stage"), stage_at, 0);
  if (static_cast<size_t>(p.stage) != expected_stage) {
    r.fail(stage_at, "must be " + std::to_string(expected_stage) +
                         ": programs are listed one per pipeline stage, in stage order");
  }
  {
    const Where at = where.at("persistent");
    Object m(r, o.need("persistent"), at);
    p.persistent.params = r.bytes(m.need("params"), at.at("params"));
    p.persistent.master_params = r.bytes(m.need("master_params"), at.at("master_params"));
    p.persistent.grads = r.bytes(m.need("grads"), at.at("grads"));
    p.persistent.optimizer_states = r.bytes(m.need("optimizer_states"), at.at("optimizer_states"));
    if (const json* j = m.find("runtime")) p.persistent.runtime = r.bytes(*j, at.at("runtime"));
    if (const json* j = m.find("host_params")) p.persistent.host_params = r.bytes(*j, at.at("host_params"));
    if (const json* j = m.find("host_master_params")) p.persistent.host_master_params = r.bytes(*j, at.at("host_master_params"));
    if (const json* j = m.find("host_grads")) p.persistent.host_grads = r.bytes(*j, at.at("host_grads"));
    if (const json* j = m.find("host_optimizer_states")) {
      p.persistent.host_optimizer_states = r.bytes(*j, at.at("host_optimizer_states"));
    }
    m.finish({"params", "master_params", "grads", "optimizer_states", "runtime", "host_params", "host_master_params",
              "host_grads", "host_optimizer_states"});
  }
  {
    const Where at = where.at("names");
    const json& names = r.array(o.need("names"), at);
    r.entries(names.size(), at, "names");
    p.names.reserve(names.size());
    for (size_t i = 0; i < names.size(); ++i) p.names.push_back(r.string(names[i], at.at(i)));
  }
  {
    const Where at = where.at("buffers");
    const json& buffers = r.array(o.need("buffers"), at);
    r.entries(buffers.size(), at, "buffers");
    p.buffers.reserve(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
      const Where b_at = at.at(i);
      Object b(r, buffers[i], b_at);
      Buffer buffer;
      buffer.name = r.index(b.need("name"), b_at.at("name"), p.names.size(), "names");
      buffer.category = r.name<MemCategory>(b.need("category"), b_at.at("category"));
      buffer.bytes = r.bytes(b.need("bytes"), b_at.at("bytes"));
      b.finish({"name", "category", "bytes"});
      p.buffers.push_back(buffer);
    }
  }
  {
    const Where at = where.at("ops");
    const json& ops = r.array(o.need("ops"), at);
    r.entries(ops.size(), at, "ops");
    p.ops.reserve(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) read_op(r, ops[i], at.at(i), p);
  }
  o.finish({"stage", "persistent", "names", "buffers", "ops"});
  return p;
}

MeshShape read_mesh(const Reader& r, const json& node, const Where& where) {
  Object o(r, node, where);
  // Each degree is bounded so that the rank count cannot overflow (2^20 per dimension is far
  // beyond any machine; the product is checked below).
  constexpr int64_t max_degree = limits::kMaxDevices;
  MeshShape s;
  s.pp = r.integer(o.need("pp"), where.at("pp"), 1, max_degree);
  s.replicate = r.integer(o.need("replicate"), where.at("replicate"), 1, max_degree);
  s.shard = r.integer(o.need("shard"), where.at("shard"), 1, max_degree);
  s.cp = r.integer(o.need("cp"), where.at("cp"), 1, max_degree);
  s.tp = r.integer(o.need("tp"), where.at("tp"), 1, max_degree);
  s.ep = r.integer(o.need("ep"), where.at("ep"), 1, max_degree);
  const json* etp = o.find("etp");
  s.etp = etp ? r.integer(*etp, where.at("etp"), 1, max_degree) : s.tp;
  if (const json* placement = o.find("placement")) {
    const Where at = where.at("placement");
    const json& dims = r.array(*placement, at);
    std::array<int, 5> seen{};
    if (dims.size() != s.placement.size()) r.fail(at, "must name each of tp, cp, shard, replicate, pp once");
    for (size_t i = 0; i < dims.size(); ++i) {
      s.placement[i] = r.name<MeshDim>(dims[i], at.at(i));
      if (++seen[static_cast<size_t>(s.placement[i])] > 1) r.fail(at.at(i), "names a dimension twice");
    }
  }
  o.finish({"pp", "replicate", "shard", "cp", "tp", "ep", "etp", "placement"});
  if (s.tp % s.etp != 0) {
    r.fail(where.at("etp"), "must divide tp = " + std::to_string(s.tp) + ", got " + std::to_string(s.etp));
  }
  // Expert parallelism is carved out of shard x cp x (tp / etp) (parallel_plan.hpp).
  const int64_t expert_ranks = s.shard * s.cp * (s.tp / s.etp);
  if (expert_ranks % s.ep != 0) {
    r.fail(where.at("ep"), "must divide shard x cp x tp / etp = " + std::to_string(expert_ranks) + ", got " +
                               std::to_string(s.ep));
  }
  const double num_ranks = static_cast<double>(s.pp) * static_cast<double>(s.replicate) * static_cast<double>(s.shard) *
                           static_cast<double>(s.cp) * static_cast<double>(s.tp);
  if (num_ranks > static_cast<double>(limits::kMaxDevices)) {
    r.fail(where, "pp x replicate x shard x cp x tp is more than " + std::to_string(limits::kMaxDevices) +
                      " ranks (moesim's limit on devices, docs/limits.md)");
  }
  return s;
}

// Checks everything RoutingSampler's constructor asserts, so a bad file is an InputError.
void read_routing(const Reader& r, const json& node, const Where& where, const MeshShape& mesh, StepGraph& g) {
  if (node.is_null()) return;
  if (!node.is_object()) r.type_error(where, node, "an object or null");
  Object o(r, node, where);
  const int64_t num_experts = r.integer(o.need("num_experts"), where.at("num_experts"), 1, limits::kMaxExperts);
  const int64_t top_k = r.integer(o.need("top_k"), where.at("top_k"), 1, num_experts);
  const int64_t ep = r.integer(o.need("ep"), where.at("ep"), 1);
  if (ep != mesh.ep) {
    r.fail(where.at("ep"), "must equal the mesh's ep " + std::to_string(mesh.ep) + ", got " + std::to_string(ep));
  }
  if (num_experts % ep != 0) r.fail(where.at("ep"), "must divide num_experts " + std::to_string(num_experts));
  // What the sampler draws at once, bounded as a scenario's (scenario_checks.cpp).
  const auto assignments = limits::checked_mul(ep * g.plan.routed_tokens(g.tokens_per_micro_batch), top_k);
  if (!assignments || *assignments > limits::kMaxRoutedAssignments) {
    r.fail(where.at("top_k"), "ep x tokens_per_micro_batch x top_k (expert assignments per EP group and micro-batch) "
                              "exceeds " + std::to_string(limits::kMaxRoutedAssignments) + " (moesim's limit, docs/limits.md)");
  }
  RoutingSpec spec;
  if (const json* j = o.find("distribution")) spec.distribution = r.name<RoutingDistribution>(*j, where.at("distribution"));
  if (const json* j = o.find("skew")) spec.skew = r.amount(*j, where.at("skew"), limits::kMaxSkew);
  if (const json* j = o.find("seed")) spec.seed = r.integer(*j, where.at("seed"), std::numeric_limits<int64_t>::min());
  if (const json* j = o.find("num_sampled_steps")) spec.num_sampled_steps = r.integer(*j, where.at("num_sampled_steps"), 1, limits::kMaxSampledSteps);
  if (const json* j = o.find("histogram_file")) spec.histogram = r.string(*j, where.at("histogram_file"));
  if (const json* j = o.find("groups")) spec.groups = r.integer(*j, where.at("groups"), 1, num_experts);
  if (num_experts % spec.groups != 0) r.fail(where.at("groups"), "must divide num_experts " + std::to_string(num_experts));
  if (const json* j = o.find("groups_per_token")) {
    spec.groups_per_token = r.integer(*j, where.at("groups_per_token"), 0, spec.groups);
  }
  int64_t per_node = ep;
  if (const json* j = o.find("ep_ranks_per_node")) per_node = r.integer(*j, where.at("ep_ranks_per_node"), 1, ep);
  if (ep % per_node != 0) r.fail(where.at("ep_ranks_per_node"), "must divide ep " + std::to_string(ep));
  if (const json* j = o.find("nodes_per_token")) {
    spec.nodes_per_token = r.integer(*j, where.at("nodes_per_token"), 0, ep / per_node);
  }
  if (const json* j = o.find("devices_per_token")) spec.devices_per_token = r.integer(*j, where.at("devices_per_token"), 0, ep);
  // The sampler's units: at most one limit, and M units holding at least top_k experts.
  const int64_t num_limits = (spec.groups_per_token > 0) + (spec.nodes_per_token > 0) + (spec.devices_per_token > 0);
  if (num_limits > 1) {
    r.fail(where.at(spec.devices_per_token > 0 ? "devices_per_token" : "nodes_per_token"),
           "only one of groups_per_token, nodes_per_token and devices_per_token may be set");
  }
  auto check_units = [&](const char* key, int64_t per_token, int64_t experts_per_unit) {
    if (per_token > 0 && per_token * experts_per_unit < top_k) {
      r.fail(where.at(key), "holds " + std::to_string(per_token * experts_per_unit) + " experts, fewer than top_k " +
                                std::to_string(top_k));
    }
  };
  check_units("groups_per_token", spec.groups_per_token, num_experts / spec.groups);
  check_units("nodes_per_token", spec.nodes_per_token, num_experts / ep * per_node);
  check_units("devices_per_token", spec.devices_per_token, num_experts / ep);
  if (const json* j = o.find("capacity_factor")) {
    spec.capacity_factor = r.amount(*j, where.at("capacity_factor"), limits::kMaxCapacityFactor);
    if (!(*spec.capacity_factor > 0)) r.fail(where.at("capacity_factor"), "must be positive, got 0");
  }
  if (const json* j = o.find("capacity_policy")) {
    spec.capacity_policy = r.name<CapacityPolicy>(*j, where.at("capacity_policy"));
    if (spec.capacity_policy != CapacityPolicy::drop && !spec.capacity_factor) {
      r.fail(where.at("capacity_policy"), "only applies with a capacity_factor");
    }
  }
  if (const json* j = o.find("bias_update_speed")) {
    spec.bias_update_speed = r.amount(*j, where.at("bias_update_speed"), limits::kMaxBiasUpdateSpeed);
  }
  if (const json* j = o.find("bias_start_step")) {
    spec.bias_start_step = r.integer(*j, where.at("bias_start_step"), 0, limits::kMaxBiasStartStep);
  }
  std::vector<double> histogram;
  const json* h = o.find("histogram");
  const bool wants_histogram = spec.distribution == RoutingDistribution::histogram;
  if (h != nullptr) {
    const Where at = where.at("histogram");
    if (!wants_histogram) r.fail(at, "only a histogram distribution has one");
    r.array(*h, at);
    if (static_cast<int64_t>(h->size()) != num_experts) {
      r.fail(at, "expected one count per expert (" + std::to_string(num_experts) + "), got " + std::to_string(h->size()));
    }
    double total = 0;
    for (size_t i = 0; i < h->size(); ++i) {
      total += histogram.emplace_back(r.amount((*h)[i], at.at(i), limits::kMaxTokenCount));
    }
    if (!(total > 0)) r.fail(at, "all counts are zero");
  } else if (wants_histogram) {
    r.fail(where.at("histogram"), "missing required key (the distribution is histogram)");
  }
  o.finish({"num_experts", "top_k", "ep", "distribution", "skew", "seed", "num_sampled_steps", "histogram_file",
            "groups", "groups_per_token", "histogram", "nodes_per_token", "ep_ranks_per_node", "devices_per_token",
            "capacity_factor", "capacity_policy", "bias_update_speed", "bias_start_step"});
  g.routing.emplace(spec, num_experts, top_k, ep, std::move(histogram), per_node);
}

}  // namespace

std::string export_graph_json(const StepGraph& g) {
  Writer w;
  const MeshShape& mesh = g.plan.shape();
  w.raw("{\n  \"format\": ");
  w.string(kFormat);
  w.raw(",\n  \"version\": ");
  w.number(kVersion);
  w.raw(",\n  \"scenario\": ");
  w.string(g.scenario);
  w.raw(",\n  \"mesh\": {\"pp\": ");
  w.number(mesh.pp);
  w.raw(", \"replicate\": ");
  w.number(mesh.replicate);
  w.raw(", \"shard\": ");
  w.number(mesh.shard);
  w.raw(", \"cp\": ");
  w.number(mesh.cp);
  w.raw(", \"tp\": ");
  w.number(mesh.tp);
  w.raw(", \"ep\": ");
  w.number(mesh.ep);
  if (mesh.etp != mesh.tp) {  // written only when the experts are folded, so older files read alike
    w.raw(", \"etp\": ");
    w.number(mesh.etp);
  }
  if (mesh.placement != MeshShape{}.placement) {  // written only when not the default, likewise
    w.raw(", \"placement\": [");
    for (size_t i = 0; i < mesh.placement.size(); ++i) {
      if (i > 0) w.raw(", ");
      w.string(enum_name(mesh.placement[i]));
    }
    w.raw("]");
  }
  w.raw("},\n  \"num_micro_batches\": ");
  w.number(g.num_micro_batches);
  w.raw(",\n  \"tokens_per_micro_batch\": ");
  w.number(g.tokens_per_micro_batch);
  w.raw(",\n  \"tokens_per_step\": ");
  w.number(g.tokens_per_step);
  w.raw(",\n  \"seq_len\": ");
  w.number(g.seq_len);
  w.raw(",\n  \"allocator_fragmentation\": ");
  w.number(g.allocator_fragmentation, "allocator_fragmentation");
  if (g.host_op_issue_s > 0) {  // written only when not the default
    w.raw(",\n  \"host_op_issue_s\": ");
    w.number(g.host_op_issue_s, "host_op_issue_s");
  }
  if (g.host_kernel_issue_s > 0) {  // written only when not the default
    w.raw(",\n  \"host_kernel_issue_s\": ");
    w.number(g.host_kernel_issue_s, "host_kernel_issue_s");
  }
  if (g.host_waits_for_routing) {  // written only when not the default
    w.raw(",\n  \"host_waits_for_routing\": true");
  }
  if (g.expert_dispatch != ExpertDispatch::direct) {  // written only when not the default
    w.raw(",\n  \"expert_dispatch\": ");
    w.string(enum_name(g.expert_dispatch));
  }
  w.raw(",\n  \"routing\": ");
  write_routing(w, g.routing);
  w.raw(",\n  \"programs\": [");
  for (size_t i = 0; i < g.programs.size(); ++i) {
    w.raw(i == 0 ? "\n" : ",\n");
    write_program(w, g.programs[i]);
  }
  w.raw(g.programs.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return std::move(w.text());
}

StepGraph import_graph_json(const std::string& text, const std::string& file) {
  const json root = parse_json(InputText{file, text, false});
  const Reader r(file);
  const Where top;
  Object o(r, root, top);

  // Format and version first, so that another kind of file or a later version is named as such
  // rather than reported as its first unknown key.
  {
    const Where at = top.at("format");
    if (r.string(o.need("format"), at) != kFormat) {
      r.fail(at, "not a moesim graph file (expected \"" + std::string(kFormat) + "\")");
    }
    const Where v_at = top.at("version");
    const int64_t version = r.integer(o.need("version"), v_at, 0);
    if (version != kVersion) {
      r.fail(v_at, "version " + std::to_string(version) + " is not supported; this build reads version " +
                       std::to_string(kVersion));
    }
  }

  StepGraph g;
  g.scenario = r.string(o.need("scenario"), top.at("scenario"));
  g.source = file;
  const MeshShape mesh = read_mesh(r, o.need("mesh"), top.at("mesh"));
  g.plan = ParallelPlan(mesh);
  g.num_micro_batches =
      r.integer(o.need("num_micro_batches"), top.at("num_micro_batches"), 0, limits::kMaxMicroBatches);
  g.tokens_per_micro_batch =
      r.integer(o.need("tokens_per_micro_batch"), top.at("tokens_per_micro_batch"), 0, limits::kMaxTokensPerStep);
  g.tokens_per_step = r.integer(o.need("tokens_per_step"), top.at("tokens_per_step"), 0, limits::kMaxTokensPerStep);
  g.seq_len = r.integer(o.need("seq_len"), top.at("seq_len"), 0, limits::kMaxSequence);
  if (const json* j = o.find("allocator_fragmentation")) {
    g.allocator_fragmentation = r.amount(*j, top.at("allocator_fragmentation"), 1);  // as the scenario's field
  }
  if (const json* j = o.find("host_op_issue_s")) g.host_op_issue_s = r.amount(*j, top.at("host_op_issue_s"), limits::kMaxLatency);
  if (const json* j = o.find("host_kernel_issue_s")) {
    g.host_kernel_issue_s = r.amount(*j, top.at("host_kernel_issue_s"), limits::kMaxLatency);
  }
  if (const json* j = o.find("host_waits_for_routing")) {
    g.host_waits_for_routing = r.boolean(*j, top.at("host_waits_for_routing"));
  }
  if (const json* j = o.find("expert_dispatch")) g.expert_dispatch = r.name<ExpertDispatch>(*j, top.at("expert_dispatch"));
  read_routing(r, o.need("routing"), top.at("routing"), mesh, g);

  const Where at = top.at("programs");
  const json& programs = r.array(o.need("programs"), at);
  if (static_cast<int64_t>(programs.size()) != mesh.pp) {
    r.fail(at, "expected one program per pipeline stage (mesh pp = " + std::to_string(mesh.pp) + "), got " +
                   std::to_string(programs.size()));
  }
  g.programs.reserve(programs.size());
  for (size_t i = 0; i < programs.size(); ++i) g.programs.push_back(read_program(r, programs[i], at.at(i), i));
  // A send or receive names its peer by offset in its group: that member must exist (a pipeline
  // peer within the stages).
  for (size_t i = 0; i < g.programs.size(); ++i) {
    const Program& p = g.programs[i];
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const Op& op = p.ops[k];
      if (op.peer_offset == 0) continue;
      const int64_t size = g.plan.group_size(op.group);
      const int64_t peer = op.group == GroupKind::pp ? p.stage + op.peer_offset : op.peer_offset;
      const bool ok = op.group == GroupKind::pp ? peer >= 0 && peer < size : peer > -size && peer < size;
      if (!ok) {
        r.fail(at.at(i).at("ops").at(k).at("peer"),
               "peer offset " + std::to_string(op.peer_offset) + " leaves the " + std::string(enum_name(op.group)) +
                   " group of " + std::to_string(size) + " ranks" +
                   (op.group == GroupKind::pp ? " (this is stage " + std::to_string(p.stage) + ")" : ""));
      }
    }
  }
  o.finish({"format", "version", "scenario", "mesh", "num_micro_batches", "tokens_per_micro_batch", "tokens_per_step",
            "seq_len", "allocator_fragmentation", "host_op_issue_s", "host_kernel_issue_s", "host_waits_for_routing", "expert_dispatch", "routing",
            "programs"});
  return g;
}

}  // namespace moesim
