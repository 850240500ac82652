// SPDX-License-Identifier: MIT
// The graph JSON format: export -> import -> export is byte-identical on real step graphs (the
// default scenario, an MoE pipeline, a dense TP+PP plan), the imported graph equals the original
// field by field, doubles come back bit for bit, and each kind of malformed file is an InputError
// naming the JSON path of the fault.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/limits.hpp"
#include "graph/graph_json.hpp"
#include "graph/step_graph.hpp"

using namespace moesim;
using nlohmann::json;

namespace {

// Doubles compared by their bits: the format promises exactness, not closeness.
bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

bool same_tensor(const TensorDesc& a, const TensorDesc& b) { return a.shape == b.shape && a.dtype == b.dtype; }

void check_same_op(const Program& pa, const Op& a, const Program& pb, const Op& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.phase == b.phase);
  CHECK(a.stream == b.stream);
  CHECK(a.dtype == b.dtype);
  CHECK(a.group == b.group);
  CHECK(a.peer_offset == b.peer_offset);
  CHECK(a.trainable_weight == b.trainable_weight);
  CHECK(a.layer == b.layer);
  CHECK(a.micro == b.micro);
  CHECK(a.routing_layer == b.routing_layer);
  CHECK(pa.name_of(a) == pb.name_of(b));
  CHECK(same_bits(a.flops, b.flops));
  CHECK(same_bits(a.bytes_read, b.bytes_read));
  CHECK(same_bits(a.bytes_written, b.bytes_written));
  CHECK(same_bits(a.comm_bytes, b.comm_bytes));
  CHECK(a.m == b.m);
  CHECK(a.n == b.n);
  CHECK(a.k == b.k);
  CHECK(a.num_groups == b.num_groups);
  CHECK(a.num_kernels == b.num_kernels);
  REQUIRE(a.num_inputs == b.num_inputs);
  REQUIRE(a.num_outputs == b.num_outputs);
  for (size_t i = 0; i < a.num_inputs; ++i) CHECK(same_tensor(pa.inputs(a)[i], pb.inputs(b)[i]));
  for (size_t i = 0; i < a.num_outputs; ++i) CHECK(same_tensor(pa.outputs(a)[i], pb.outputs(b)[i]));
  REQUIRE(a.num_effects == b.num_effects);
  for (size_t i = 0; i < a.num_effects; ++i) {
    CHECK(pa.effects_of(a)[i].buffer == pb.effects_of(b)[i].buffer);
    CHECK(pa.effects_of(a)[i].action == pb.effects_of(b)[i].action);
  }
  REQUIRE(a.num_deps == b.num_deps);
  for (size_t i = 0; i < a.num_deps; ++i) CHECK(pa.deps_of(a)[i] == pb.deps_of(b)[i]);
  // The ranges themselves, so the flat arrays are laid out as the builder laid them out.
  CHECK(a.first_tensor == b.first_tensor);
  CHECK(a.first_effect == b.first_effect);
  CHECK(a.first_dep == b.first_dep);
}

// Every field of the graph; ops are compared on a sample of `num_samples` spread over each program
// plus the first and last, and the flat arrays compared whole.
void check_same_graph(const StepGraph& a, const StepGraph& b, size_t num_samples) {
  CHECK(a.scenario == b.scenario);
  const MeshShape& ma = a.plan.shape();
  const MeshShape& mb = b.plan.shape();
  CHECK(ma.pp == mb.pp);
  CHECK(ma.replicate == mb.replicate);
  CHECK(ma.shard == mb.shard);
  CHECK(ma.cp == mb.cp);
  CHECK(ma.tp == mb.tp);
  CHECK(ma.ep == mb.ep);
  CHECK(a.num_micro_batches == b.num_micro_batches);
  CHECK(a.tokens_per_micro_batch == b.tokens_per_micro_batch);
  CHECK(a.tokens_per_step == b.tokens_per_step);
  CHECK(a.seq_len == b.seq_len);
  CHECK(same_bits(a.host_op_issue_s, b.host_op_issue_s));
  CHECK(same_bits(a.host_kernel_issue_s, b.host_kernel_issue_s));
  CHECK(a.host_waits_for_routing == b.host_waits_for_routing);
  REQUIRE(a.routing.has_value() == b.routing.has_value());
  if (a.routing) {
    CHECK(a.routing->num_experts() == b.routing->num_experts());
    CHECK(a.routing->top_k() == b.routing->top_k());
    CHECK(a.routing->ep() == b.routing->ep());
    // Rebuilt from what the file holds, the sampler draws what the original draws.
    const auto qa = a.routing->expert_probabilities(1);
    const auto qb = b.routing->expert_probabilities(1);
    REQUIRE(qa.size() == qb.size());
    for (size_t e = 0; e < qa.size(); ++e) CHECK(same_bits(qa[e], qb[e]));
  }
  REQUIRE(a.programs.size() == b.programs.size());
  for (size_t pi = 0; pi < a.programs.size(); ++pi) {
    const Program& pa = a.programs[pi];
    const Program& pb = b.programs[pi];
    CAPTURE(pi);
    CHECK(pa.stage == pb.stage);
    CHECK(same_bits(pa.persistent.params, pb.persistent.params));
    CHECK(same_bits(pa.persistent.master_params, pb.persistent.master_params));
    CHECK(same_bits(pa.persistent.grads, pb.persistent.grads));
    CHECK(same_bits(pa.persistent.optimizer_states, pb.persistent.optimizer_states));
    CHECK(pa.names == pb.names);
    REQUIRE(pa.buffers.size() == pb.buffers.size());
    for (size_t i = 0; i < pa.buffers.size(); ++i) {
      CHECK(same_bits(pa.buffers[i].bytes, pb.buffers[i].bytes));
      CHECK(pa.buffers[i].category == pb.buffers[i].category);
      CHECK(pa.buffers[i].name == pb.buffers[i].name);
    }
    CHECK(pa.deps == pb.deps);
    REQUIRE(pa.tensors.size() == pb.tensors.size());
    REQUIRE(pa.effects.size() == pb.effects.size());
    REQUIRE(pa.ops.size() == pb.ops.size());
    REQUIRE_FALSE(pa.ops.empty());
    const size_t stride = std::max<size_t>(1, pa.ops.size() / num_samples);
    for (size_t i = 0; i < pa.ops.size(); i += stride) {
      CAPTURE(i);
      check_same_op(pa, pa.ops[i], pb, pb.ops[i]);
    }
    check_same_op(pa, pa.ops.back(), pb, pb.ops.back());
  }
}

StepGraph graph_of(const std::string& text) { return build_step_graph(load_scenario(InputText{"t.json", text, false})); }

// export -> import -> export, with the field-by-field comparison; returns the text.
std::string check_round_trip(const StepGraph& g) {
  const std::string text = export_graph_json(g);
  const StepGraph back = import_graph_json(text, "g.json");
  CHECK(export_graph_json(back) == text);
  check_same_graph(g, back, 400);
  return text;
}

size_t count_of(const StepGraph& g, OpKind kind) {
  size_t n = 0;
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) n += op.kind == kind ? 1 : 0;
  }
  return n;
}

const std::string kQwenPipeline = R"({
  "name": "qwen-pp2-ep4", "model": "qwen3-30b-a3b", "hardware": "h200-hgx", "num_devices": 8,
  "training": {"mode": "full_finetune"},
  "batch": {"global_batch_size": 16, "micro_batch_size": 1, "sequence_length": 4096},
  "parallel": {"fsdp": {"shard": 4}, "ep": 4, "tp": {"degree": 1}, "pp": {"stages": 2}},
  "routing": {"distribution": "uniform"}})";

const std::string kDenseTpPp = R"({
  "name": "llama-tp8-pp2", "model": "llama-3.1-405b", "hardware": "h200-hgx", "num_devices": 16,
  "training": {"mode": "pretrain"},
  "batch": {"global_batch_size": 8, "micro_batch_size": 1, "sequence_length": 4096},
  "parallel": {"tp": {"degree": 8, "sequence_parallel": true}, "pp": {"stages": 2}},
  "recompute": {"policy": "full"}})";

// A tiny hand-made graph: one stage, two EP ranks, three ops that use every part of the format.
StepGraph tiny_graph() {
  StepGraph g;
  g.scenario = "tiny";
  g.plan = ParallelPlan(MeshShape{1, 1, 2, 1, 1, 2});
  g.num_micro_batches = 1;
  g.tokens_per_micro_batch = 8;
  g.tokens_per_step = 16;
  g.seq_len = 8;
  g.routing.emplace(RoutingSpec{}, 4, 2, 2, std::vector<double>{});
  Program p;
  ProgramWriter w(p);
  const uint32_t x = w.buffer(8 * 16 * 2, MemCategory::activation, "x");
  const uint32_t y = w.buffer(0.1, MemCategory::comm_buffer, "y");
  Op gemm;
  gemm.kind = OpKind::gemm;
  gemm.flops = 2.0 * 8 * 16 * 16;
  gemm.m = 8;
  gemm.n = 16;
  gemm.k = 16;
  gemm.micro = 0;
  gemm.layer = 1;
  gemm.trainable_weight = true;
  const TensorDesc in[] = {TensorDesc{{8, 16, 0, 0}, Dtype::bf16}, TensorDesc{{16, 16, 0, 0}, Dtype::fp8}};
  const TensorDesc out[] = {TensorDesc{{8, 16, 0, 0}, Dtype::bf16}};
  const uint32_t g0 = w.add(gemm, "layer1.gemm", in, out);
  w.effect(g0, x, MemAction::alloc);
  Op a2a;
  a2a.kind = OpKind::all_to_all;
  a2a.stream = Stream::comm;
  a2a.group = GroupKind::ep;
  a2a.layer = 1;
  a2a.micro = 0;
  a2a.routing_layer = 1;
  a2a.comm_bytes = 1.0 / 3.0;
  const uint32_t a0 = w.add(a2a, "layer1.dispatch");
  w.depend(a0, g0);
  w.effect(a0, y, MemAction::alloc);
  Op done;
  done.kind = OpKind::elementwise;
  done.layer = 1;
  done.micro = 0;
  done.bytes_read = 5e-324;  // the smallest denormal
  done.bytes_written = std::nextafter(limits::kMaxBytes, 0.0);  // the largest accepted, 17 digits
  const uint32_t e0 = w.add(done, "layer1.combine");
  w.depend(e0, a0);
  w.effect(e0, x, MemAction::free);
  w.effect(e0, y, MemAction::free);
  p.persistent = PersistentMemory{1e9, 0.5, 2.0 / 7.0, 0};
  g.programs.push_back(std::move(p));
  return g;
}

// Imports `mutated` (a JSON tree of a graph file) and returns the JSON path of the InputError.
std::string error_path(const json& mutated) {
  try {
    import_graph_json(mutated.dump(), "bad.json");
  } catch (const InputError& e) {
    CHECK(e.file() == "bad.json");
    return e.path();
  }
  FAIL("no InputError for " << mutated.dump().substr(0, 300));
  return "";
}

}  // namespace

TEST_CASE("the default scenario's graph round-trips byte for byte") {
  const StepGraph g = build_step_graph(load_scenario(read_input(std::string(kDefaultScenario), "scenarios", "SCENARIO")));
  const std::string text = check_round_trip(g);
  CHECK(text.starts_with("{\n  \"format\": \"moesim-graph\",\n  \"version\": 1,"));
  // Deterministic: a second build of the same scenario writes the same bytes.
  const StepGraph again = build_step_graph(load_scenario(read_input(std::string(kDefaultScenario), "scenarios", "SCENARIO")));
  CHECK(export_graph_json(again) == text);
  CHECK(count_of(g, OpKind::all_to_all) > 0);
  CHECK(count_of(g, OpKind::swap_out) > 0);
}

TEST_CASE("an MoE pipeline (qwen3-30b-a3b, FSDP 4, PP 2, EP 4) round-trips") {
  const StepGraph g = graph_of(kQwenPipeline);
  REQUIRE(g.programs.size() == 2);
  REQUIRE(g.routing.has_value());
  CHECK(g.num_micro_batches == 4);
  check_round_trip(g);
  CHECK(count_of(g, OpKind::send) > 0);
  CHECK(count_of(g, OpKind::recv) > 0);
  CHECK(count_of(g, OpKind::all_to_all) > 0);
}

TEST_CASE("a dense TP 8 x PP 2 plan (llama-3.1-405b) round-trips, with no routing") {
  const StepGraph g = graph_of(kDenseTpPp);
  REQUIRE(g.programs.size() == 2);
  CHECK_FALSE(g.routing.has_value());
  CHECK(g.num_micro_batches == 8);
  const std::string text = check_round_trip(g);
  CHECK(text.find("\"routing\": null") != std::string::npos);
  size_t num_recompute = 0;
  for (const Op& op : g.programs[1].ops) num_recompute += op.phase == Phase::recompute ? 1 : 0;
  CHECK(num_recompute > 0);
}

TEST_CASE("a plan's placement of the mesh dimensions round-trips, and the default is not written") {
  StepGraph g;
  MeshShape shape{2, 1, 2, 1, 2, 2};
  shape.placement = {MeshDim::pp, MeshDim::shard, MeshDim::tp, MeshDim::cp, MeshDim::replicate};
  g.plan = ParallelPlan(shape);
  g.programs.resize(2);
  g.programs[1].stage = 1;
  const std::string text = export_graph_json(g);
  CHECK(text.find(R"("placement": ["pp", "shard", "tp", "cp", "replicate"])") != std::string::npos);
  const StepGraph back = import_graph_json(text, "g.json");
  CHECK(export_graph_json(back) == text);
  CHECK(back.plan.shape() == g.plan.shape());
  CHECK(back.plan.members(0, GroupKind::pp) == std::vector<int64_t>{0, 1});
  CHECK(export_graph_json(graph_of(kQwenPipeline)).find("placement") == std::string::npos);
}

TEST_CASE("doubles and odd shapes come back bit for bit") {
  StepGraph g = tiny_graph();
  // An interior zero dimension and all four dimensions in use.
  g.programs[0].tensors[0].shape = {3, 0, 5, 0};
  g.programs[0].tensors[1].shape = {1, 2, 3, 4};
  const std::string text = export_graph_json(g);
  const StepGraph back = import_graph_json(text, "g.json");
  CHECK(export_graph_json(back) == text);
  check_same_graph(g, back, 3);
  const Program& p = back.programs[0];
  CHECK(p.tensors[0].shape == std::array<int64_t, 4>{3, 0, 5, 0});
  CHECK(p.tensors[1].shape == std::array<int64_t, 4>{1, 2, 3, 4});
  CHECK(same_bits(p.ops[1].comm_bytes, 1.0 / 3.0));
  CHECK(same_bits(p.ops[2].bytes_read, 5e-324));
  CHECK(same_bits(p.ops[2].bytes_written, std::nextafter(limits::kMaxBytes, 0.0)));
  CHECK(same_bits(p.persistent.grads, 2.0 / 7.0));
  CHECK(same_bits(p.buffers[1].bytes, 0.1));
}

TEST_CASE("the host's pace round-trips, each field written only when not 0") {
  StepGraph g = tiny_graph();
  CHECK(export_graph_json(g).find("host_") == std::string::npos);
  g.host_kernel_issue_s = 30.4e-6;
  std::string text = export_graph_json(g);
  CHECK(text.find("host_op_issue_s") == std::string::npos);
  CHECK(text.find("\"host_kernel_issue_s\": ") != std::string::npos);
  g.host_op_issue_s = 277.7e-6;
  text = export_graph_json(g);
  CHECK(text.find("host_waits_for_routing") == std::string::npos);
  g.host_waits_for_routing = true;
  text = export_graph_json(g);
  CHECK(text.find("\"host_waits_for_routing\": true") != std::string::npos);
  const StepGraph back = import_graph_json(text, "g.json");
  CHECK(back.host_waits_for_routing);
  CHECK(export_graph_json(back) == text);
  check_same_graph(g, back, 3);
}

TEST_CASE("a non-finite size is a builder bug, not something to write") {
  StepGraph g = tiny_graph();
  g.programs[0].ops[0].flops = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(export_graph_json(g), std::logic_error);
  g = tiny_graph();
  g.programs[0].ops[2].first_dep = 0;  // overlaps op 1's range: not laid out op after op
  CHECK_THROWS_AS(export_graph_json(g), std::logic_error);
}

TEST_CASE("the routing description rebuilds the sampler") {
  json j = json::parse(export_graph_json(tiny_graph()));
  j["routing"] = json{{"num_experts", 4}, {"top_k", 1}, {"ep", 2}, {"distribution", "histogram"},
                      {"histogram_file", "h.json"}, {"histogram", {1, 2, 3, 4}}, {"seed", 7}, {"num_sampled_steps", 3}};
  const StepGraph g = import_graph_json(j.dump(), "h.json");
  REQUIRE(g.routing.has_value());
  const auto q = g.routing->expert_probabilities(5);
  REQUIRE(q.size() == 4);
  for (size_t e = 0; e < 4; ++e) CHECK(q[e] == doctest::Approx(static_cast<double>(e + 1) / 10.0));
  CHECK(g.routing->expected_fraction(5, 1) == doctest::Approx(0.7));

  j["routing"]["histogram"] = {1, 2, 3};
  CHECK(error_path(j) == "/routing/histogram");
  j["routing"]["histogram"] = {0, 0, 0, 0};
  CHECK(error_path(j) == "/routing/histogram");
  j["routing"].erase("histogram");
  CHECK(error_path(j) == "/routing/histogram");
  j["routing"]["distribution"] = "zipf";
  CHECK(error_path(j) == "/routing/distribution");
  j["routing"]["distribution"] = "skewed";
  j["routing"]["skew"] = -1;
  CHECK(error_path(j) == "/routing/skew");
  j["routing"]["skew"] = 1.1;
  j["routing"]["ep"] = 4;
  CHECK(error_path(j) == "/routing/ep");  // not the mesh's ep
  j["routing"]["ep"] = 2;
  j["routing"]["top_k"] = 5;
  CHECK(error_path(j) == "/routing/top_k");
  j["routing"]["top_k"] = 2;
  CHECK_NOTHROW(import_graph_json(j.dump(), "ok.json"));
}

TEST_CASE("malformed graph files are InputErrors naming the JSON path") {
  const std::string text = export_graph_json(tiny_graph());
  const json good = json::parse(text);
  REQUIRE_NOTHROW(import_graph_json(good.dump(), "good.json"));
  auto with = [&](auto&& mutate) {  // on a copy: every case starts from the good file
    json j = good;
    mutate(j);
    return error_path(j);
  };

  SUBCASE("truncated text") {
    try {
      import_graph_json(text.substr(0, text.size() / 2), "cut.json");
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(e.file() == "cut.json");
      CHECK(e.path().empty());
      CHECK(std::string(e.what()).find("invalid JSON at line") != std::string::npos);
    }
  }
  SUBCASE("an unknown op kind") {
    CHECK(with([](json& j) { j["programs"][0]["ops"][1]["kind"] = "all_to_some"; }) == "/programs/0/ops/1/kind");
  }
  SUBCASE("a dependency pointing forward, or at the op itself") {
    CHECK(with([](json& j) { j["programs"][0]["ops"][1]["deps"] = {2}; }) == "/programs/0/ops/1/deps/0");
    CHECK(with([](json& j) { j["programs"][0]["ops"][2]["deps"] = {0, 2}; }) == "/programs/0/ops/2/deps/1");
    CHECK(with([](json& j) { j["programs"][0]["ops"][2]["deps"] = {-1}; }) == "/programs/0/ops/2/deps/0");
  }
  SUBCASE("a buffer or name index out of range") {
    CHECK(with([](json& j) { j["programs"][0]["ops"][2]["effects"][1][0] = 2; }) == "/programs/0/ops/2/effects/1/0");
    CHECK(with([](json& j) { j["programs"][0]["ops"][0]["name"] = 99; }) == "/programs/0/ops/0/name");
    CHECK(with([](json& j) { j["programs"][0]["buffers"][1]["name"] = 5; }) == "/programs/0/buffers/1/name");
  }
  SUBCASE("a missing key") {
    CHECK(with([](json& j) { j["programs"][0]["ops"][1].erase("kind"); }) == "/programs/0/ops/1/kind");
    CHECK(with([](json& j) { j.erase("mesh"); }) == "/mesh");
    CHECK(with([](json& j) { j["programs"][0]["persistent"].erase("grads"); }) == "/programs/0/persistent/grads");
  }
  SUBCASE("an unknown key") {
    CHECK(with([](json& j) { j["programs"][0]["ops"][0]["colour"] = "red"; }) == "/programs/0/ops/0/colour");
    CHECK(with([](json& j) { j["comment"] = "hi"; }) == "/comment");
    CHECK(with([](json& j) { j["mesh"]["dp"] = 2; }) == "/mesh/dp");
  }
  SUBCASE("a wrong type or value") {
    CHECK(with([](json& j) { j["programs"][0]["ops"][0]["flops"] = "4096"; }) == "/programs/0/ops/0/flops");
    CHECK(with([](json& j) { j["programs"][0]["ops"][0]["m"] = 8.5; }) == "/programs/0/ops/0/m");
    CHECK(with([](json& j) { j["programs"][0]["buffers"][0]["bytes"] = -1; }) == "/programs/0/buffers/0/bytes");
    CHECK(with([](json& j) { j["programs"][0]["ops"][0]["in"][1][2] = "bf17"; }) == "/programs/0/ops/0/in/1/2");
    CHECK(with([](json& j) { j["programs"][0]["ops"][0]["in"][1] = {1, 2, 3, 4, 5, "bf16"}; }) == "/programs/0/ops/0/in/1");
    CHECK(with([](json& j) { j["programs"][0]["ops"][1]["peer"] = int64_t{1} << 40; }) == "/programs/0/ops/1/peer");
    CHECK(with([](json& j) { j["programs"][0]["ops"][1]["group"] = "world"; }) == "/programs/0/ops/1/group");
    CHECK(with([](json& j) { j["programs"][0]["ops"][2]["effects"][0][1] = "leak"; }) == "/programs/0/ops/2/effects/0/1");
    CHECK(with([](json& j) { j["programs"][0]["ops"] = json::object(); }) == "/programs/0/ops");
  }
  SUBCASE("the file's header and shape") {
    CHECK(with([](json& j) { j["format"] = "chrome-trace"; }) == "/format");
    CHECK(with([](json& j) { j["version"] = 2; }) == "/version");
    CHECK(with([](json& j) { j["mesh"]["ep"] = 3; }) == "/mesh/ep");  // does not divide shard x cp
    CHECK(with([](json& j) { j["mesh"]["pp"] = 2; }) == "/programs");  // one program per stage
    CHECK(with([](json& j) { j["programs"][0]["stage"] = 1; }) == "/programs/0/stage");
    CHECK(with([](json& j) { j["routing"]["ep"] = 1; }) == "/routing/ep");
    CHECK(error_path(json::array()) == "/");
  }
  SUBCASE("a duplicate key") {
    std::string dup = text;
    const std::string kind = "{\"kind\":\"gemm\",";
    const size_t at = dup.find(kind);
    REQUIRE(at != std::string::npos);
    dup.insert(at + kind.size(), "\"kind\":\"gemm\",");
    try {
      import_graph_json(dup, "dup.json");
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(e.path() == "/programs/0/ops/0/kind");
    }
  }
}

TEST_CASE("the routing mechanisms (limits, capacity, bias balancing) round-trip and rebuild the sampler") {
  json j = json::parse(export_graph_json(tiny_graph()));
  j["routing"] = json{{"num_experts", 8}, {"top_k", 2}, {"ep", 2}, {"distribution", "skewed"}, {"skew", 1.0},
                      {"nodes_per_token", 1}, {"ep_ranks_per_node", 1}, {"capacity_factor", 1.25},
                      {"capacity_policy", "pad"}, {"bias_update_speed", 0.1}, {"bias_start_step", 3}};
  const StepGraph g = import_graph_json(j.dump(), "r.json");
  REQUIRE(g.routing.has_value());
  CHECK(g.routing->limited());
  CHECK(g.routing->limit_units() == 2);  // 2 EP ranks, one a node
  CHECK(g.routing->ep_ranks_per_node() == 1);
  CHECK(g.routing->expert_capacity(100) == 63);  // ceil(1.25 * 2 * 100 * 2 / 8) = ceil(62.5)
  CHECK(g.routing->spec().capacity_policy == CapacityPolicy::pad);
  CHECK(g.routing->spec().bias_start_step == 3);
  const std::string text = check_round_trip(g);
  for (const char* key : {"nodes_per_token", "ep_ranks_per_node", "capacity_factor", "capacity_policy",
                          "bias_update_speed", "bias_start_step"}) {
    CHECK(text.find(std::string("\"") + key + "\"") != std::string::npos);
  }
  // Not written when unset: the default graph's routing block stays as it was.
  CHECK(export_graph_json(tiny_graph()).find("capacity_factor") == std::string::npos);

  j["routing"]["devices_per_token"] = 1;
  CHECK(error_path(j) == "/routing/devices_per_token");  // two limits
  j["routing"].erase("devices_per_token");
  j["routing"]["ep_ranks_per_node"] = 3;
  CHECK(error_path(j) == "/routing/ep_ranks_per_node");
  j["routing"]["ep_ranks_per_node"] = 1;
  j["routing"]["capacity_factor"] = 0;
  CHECK(error_path(j) == "/routing/capacity_factor");
  j["routing"].erase("capacity_factor");
  CHECK(error_path(j) == "/routing/capacity_policy");  // pad without a capacity
  j["routing"]["capacity_policy"] = "drop";
  j["routing"]["bias_update_speed"] = -1;
  CHECK(error_path(j) == "/routing/bias_update_speed");
}
