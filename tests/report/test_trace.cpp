// SPDX-License-Identifier: MIT
// The Chrome trace and memory CSV writers on a real step graph with a hand-made two-rank timeline:
// the JSON parses, names every process and used stream, has one complete event per record with
// ts/dur exact in microseconds and the op's fields, one counter per memory sample, leaves out
// ranks past max_ranks and says so, escapes names, rejects records that do not fit the graph,
// and is deterministic; the CSV is exact line by line. Also times a million records.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost/cost_model.hpp"
#include "engine/engine.hpp"
#include "graph/routing.hpp"
#include "graph/step_graph.hpp"
#include "report/trace.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;
using nlohmann::json;

namespace {

// 8 H200s, FSDP over all 8, EP 8: program 0 has GEMMs, FSDP all-gathers and expert all-to-alls.
// StepGraph does not copy (its routing sampler does not), so tests that need their own build one.
StepGraph build_graph() {
  const std::string text = R"({"name": "trace-test", "model": "qwen3-30b-a3b", "hardware": "h200-hgx",
    "num_devices": 8, "training": {"mode": "pretrain"},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1, "sequence_length": 1024},
    "parallel": {"fsdp": {"shard": 8, "replicate": 1}, "ep": 8}})";
  return build_step_graph(load_scenario(InputText{"t.json", text, false}));
}

const StepGraph& graph() {
  static const StepGraph g = build_graph();
  return g;
}

uint32_t first_op(const Program& p, OpKind kind) {
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].kind == kind && p.ops[i].micro >= 0) return i;
  }
  FAIL("no op of kind ", enum_name(kind));
  return 0;
}

struct Fixture {
  uint32_t gemm = 0, gather = 0, a2a = 0;
  Timeline timeline;
};

// Rank 0 and rank 1: a GEMM on compute, an all-gather and an all-to-all on comm; times chosen to
// exercise the exact decimal conversion (zero, whole microseconds, one picosecond, trailing zeros).
Fixture make_fixture() {
  const Program& p = graph().programs[0];
  Fixture f;
  f.gemm = first_op(p, OpKind::gemm);
  f.gather = first_op(p, OpKind::all_gather);
  f.a2a = first_op(p, OpKind::all_to_all);
  f.timeline.records = {
      {0, 0, f.gather, Stream::comm, 0, 1'000'000},          // ts 0, dur 1
      {1, 0, f.gather, Stream::comm, 5, 1'234'567},          // ts 0.000005, dur 1.234562
      {0, 0, f.gemm, Stream::compute, 1'234'567, 2'234'568},  // ts 1.234567, dur 1.000001
      {1, 0, f.gemm, Stream::compute, 1'500'000, 1'500'001},  // ts 1.5, dur 0.000001
      {0, 0, f.a2a, Stream::comm, 12'345'678'901'234, 12'345'678'901'234},  // ts 12345678.901234, dur 0
  };
  f.timeline.memory = {
      {0, 0, 1.5e9, 0},
      {0, 1'234'567, 2.25e9, 0.5e9},
      {1, 0, 1.5e9, 0},
      {1, 1'500'001, 3e9, 1},
  };
  f.timeline.step_end = 12'345'678'901'234;
  return f;
}

std::vector<json> events_with(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == ph) out.push_back(e);
  }
  return out;
}

// The metadata event `name` for pid (and tid), or null.
json metadata(const json& trace, const std::string& name, int64_t pid, int64_t tid = -1) {
  for (const json& e : events_with(trace, "M")) {
    if (e.at("name") == name && e.at("pid") == pid && (tid < 0 || e.at("tid") == tid)) return e;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("trace: metadata names each rank's process and its used streams") {
  const Fixture f = make_fixture();
  const json trace = json::parse(chrome_trace_json(graph(), f.timeline, {}));
  REQUIRE(trace.at("traceEvents").is_array());
  CHECK(trace.at("otherData").at("scenario") == "trace-test");
  CHECK(trace.at("otherData").at("num_ranks") == 8);
  CHECK(trace.at("otherData").at("num_ranks_written") == 8);
  CHECK(trace.at("otherData").at("step_end_us") == 12345678.901234);

  // pid = rank + 1, tid = 10 pid + 1 + stream.
  for (int64_t rank = 0; rank < 2; ++rank) {
    const int64_t pid = rank + 1;
    const json process = metadata(trace, "process_name", pid);
    REQUIRE(process.is_object());
    CHECK(process.at("args").at("name") == "rank " + std::to_string(rank) + " (program 0)");
    CHECK(metadata(trace, "process_sort_index", pid).at("args").at("sort_index") == rank);
    CHECK(metadata(trace, "thread_name", pid, 10 * pid + 1).at("args").at("name") == "compute");
    CHECK(metadata(trace, "thread_name", pid, 10 * pid + 2).at("args").at("name") == "comm");
    CHECK(metadata(trace, "thread_sort_index", pid, 10 * pid + 2).at("args").at("sort_index") == 1);
    CHECK(metadata(trace, "thread_name", pid, 10 * pid + 3).is_null());  // no copies in this timeline
  }
  // Ranks 2..7 ran nothing here: no empty processes.
  CHECK(metadata(trace, "process_name", 3).is_null());
  CHECK(events_with(trace, "M").size() == 2 * 2 + 2 * 2 * 2);
  CHECK(metadata(trace, "ranks_left_out", 1).is_null());
}

TEST_CASE("trace: one complete event per record, exact times and the op's fields") {
  const Fixture f = make_fixture();
  const std::string text = chrome_trace_json(graph(), f.timeline, {});
  const json trace = json::parse(text);
  const std::vector<json> xs = events_with(trace, "X");
  REQUIRE(xs.size() == f.timeline.records.size());

  // The text itself, not only the parsed doubles: picoseconds become exact decimals.
  for (const char* s : {R"("ts":0,"dur":1,)", R"("ts":0.000005,"dur":1.234562,)", R"("ts":1.234567,"dur":1.000001,)",
                        R"("ts":1.5,"dur":0.000001,)", R"("ts":12345678.901234,"dur":0,)"}) {
    CHECK_MESSAGE(text.find(s) != std::string::npos, s);
  }

  const Program& p = graph().programs[0];
  const std::vector<std::pair<double, double>> times = {
      {0, 1}, {0.000005, 1.234562}, {1.234567, 1.000001}, {1.5, 0.000001}, {12345678.901234, 0}};
  for (size_t i = 0; i < xs.size(); ++i) {
    const ExecRecord& rec = f.timeline.records[i];
    const Op& op = p.ops[rec.op];
    const json& e = xs[i];
    CAPTURE(i);
    CHECK(e.at("pid") == rec.rank + 1);
    CHECK(e.at("tid") == 10 * (rec.rank + 1) + 1 + static_cast<int>(rec.stream));
    CHECK(e.at("ts").get<double>() == times[i].first);
    CHECK(e.at("dur").get<double>() == times[i].second);
    CHECK(e.at("name") == p.name_of(op));
    CHECK(e.at("cat") == enum_name(op.kind));
    const json& args = e.at("args");
    CHECK(args.at("phase") == enum_name(op.phase));
    CHECK(args.at("layer") == op.layer);
    CHECK(args.at("micro") == op.micro);
    CHECK(args.at("flops").get<double>() == op.flops);
    if (is_communication(op.kind)) {
      CHECK(args.at("bytes").get<double>() == op.comm_bytes);
      CHECK(args.at("group") == enum_name(op.group));
    } else {
      CHECK(args.at("bytes").get<double>() == op.bytes_read + op.bytes_written);
      CHECK_FALSE(args.contains("group"));
    }
  }
  // The ops are what they should be: FSDP gathers, expert all-to-all, a GEMM with work.
  CHECK(xs[0].at("args").at("group") == "fsdp");
  CHECK(xs[4].at("args").at("group") == "ep");
  CHECK(xs[2].at("args").at("flops").get<double>() > 0);
  CHECK(xs[0].at("args").at("bytes").get<double>() > 0);
}

TEST_CASE("trace: counter events carry each memory sample in GB") {
  const Fixture f = make_fixture();
  const json trace = json::parse(chrome_trace_json(graph(), f.timeline, {}));
  const std::vector<json> cs = events_with(trace, "C");
  REQUIRE(cs.size() == f.timeline.memory.size());
  const std::vector<std::vector<double>> expected = {
      {1, 0, 1.5, 0}, {1, 1.234567, 2.25, 0.5}, {2, 0, 1.5, 0}, {2, 1.500001, 3, 1e-9}};
  for (size_t i = 0; i < cs.size(); ++i) {
    CAPTURE(i);
    CHECK(cs[i].at("name") == "memory");
    CHECK(cs[i].at("pid").get<double>() == expected[i][0]);
    CHECK(cs[i].at("ts").get<double>() == expected[i][1]);
    CHECK(cs[i].at("args").at("hbm_GB").get<double>() == expected[i][2]);
    CHECK(cs[i].at("args").at("ddr_GB").get<double>() == expected[i][3]);
  }
}

TEST_CASE("trace: ranks past max_ranks are left out, and a metadata event says so") {
  const Fixture f = make_fixture();
  const json trace = json::parse(chrome_trace_json(graph(), f.timeline, TraceOptions{.max_ranks = 1}));
  std::set<int64_t> pids;
  for (const json& e : trace.at("traceEvents")) pids.insert(e.at("pid").get<int64_t>());
  CHECK(pids == std::set<int64_t>{1});
  CHECK(events_with(trace, "X").size() == 3);  // rank 0's records
  CHECK(events_with(trace, "C").size() == 2);
  const json note = metadata(trace, "ranks_left_out", 1);
  REQUIRE(note.is_object());
  CHECK(note.at("args").at("first_rank") == 1);
  CHECK(note.at("args").at("num_ranks") == 7);
  CHECK(note.at("args").at("num_records") == 2);
  CHECK(note.at("args").at("num_memory_samples") == 2);
  CHECK(note.at("args").at("reason") == "max_ranks = 1: ranks 1 to 7 are left out of this trace");
  CHECK(trace.at("otherData").at("num_ranks_written") == 1);

  // max_ranks 0 writes no rank at all, and is still a valid trace.
  const json none = json::parse(chrome_trace_json(graph(), f.timeline, TraceOptions{.max_ranks = 0}));
  CHECK(events_with(none, "X").empty());
  CHECK(events_with(none, "C").empty());
  CHECK(metadata(none, "ranks_left_out", 1).at("args").at("num_ranks") == 8);
}

TEST_CASE("trace: deterministic, and the same bytes for a graph built again and a copied timeline") {
  const Fixture f = make_fixture();
  const std::string a = chrome_trace_json(graph(), f.timeline, {});
  const StepGraph graph_copy = build_graph();
  const Timeline timeline_copy = f.timeline;
  CHECK(a == chrome_trace_json(graph(), f.timeline, {}));
  CHECK(a == chrome_trace_json(graph_copy, timeline_copy, {}));
  // And the timeline's content matters: a change of one picosecond changes the text.
  Timeline moved = f.timeline;
  moved.records[2].end += 1;
  CHECK(a != chrome_trace_json(graph(), moved, {}));
}

TEST_CASE("trace: names and the scenario are escaped for JSON") {
  const Fixture f = make_fixture();
  StepGraph g = build_graph();
  const std::string odd = "layers.0.\"quoted\"\\back\tslash\x01";
  g.programs[0].names[g.programs[0].ops[f.gemm].name] = odd;
  g.scenario = "a \"b\" \\ c";
  const json trace = json::parse(chrome_trace_json(g, f.timeline, {}));
  CHECK(events_with(trace, "X")[2].at("name") == odd);
  CHECK(trace.at("otherData").at("scenario") == g.scenario);
}

TEST_CASE("trace: records that do not fit the graph are rejected") {
  const Fixture f = make_fixture();
  auto rejects = [&](auto change) {
    Timeline t = f.timeline;
    change(t);
    CHECK_THROWS_AS(chrome_trace_json(graph(), t, {}), std::invalid_argument);
  };
  rejects([](Timeline& t) { t.records[0].rank = 8; });
  rejects([](Timeline& t) { t.records[0].rank = -1; });
  rejects([](Timeline& t) { t.records[0].op = static_cast<uint32_t>(graph().programs[0].ops.size()); });
  rejects([](Timeline& t) { t.records[0].end = t.records[0].start - 1; });
  rejects([](Timeline& t) { t.records[0].program = 1; });
  rejects([](Timeline& t) { t.memory[0].rank = 8; });
  rejects([](Timeline& t) { t.memory[0].hbm_bytes = std::numeric_limits<double>::quiet_NaN(); });
  // Also when the bad record belongs to a rank that is left out.
  Timeline t = f.timeline;
  t.records[1].op = static_cast<uint32_t>(graph().programs[0].ops.size());
  CHECK_THROWS_AS(chrome_trace_json(graph(), t, TraceOptions{.max_ranks = 1}), std::invalid_argument);
}

TEST_CASE("trace: routed ops carry the routing draw's rows and bytes (capacity padding shows as C rows per expert)") {
  const std::string text = R"({"name": "trace-pad", "model": "qwen3-30b-a3b", "hardware": "h200-hgx",
    "num_devices": 8, "training": {"mode": "pretrain"},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1, "sequence_length": 1024},
    "parallel": {"fsdp": {"shard": 8, "replicate": 1}, "ep": 8},
    "routing": {"distribution": "skewed", "skew": 1.0, "capacity_factor": 1.25, "capacity_policy": "pad"}})";
  const Scenario s = load_scenario(InputText{"t.json", text, false});
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  EngineOptions o;
  o.record_timeline = true;
  const StepResult r = Engine(g, cost).run(o);
  const json trace = json::parse(chrome_trace_json(g, r.timeline, {}));
  // Qwen3-30B-A3B: 128 experts, top-8, EP 8 -> 16 experts per rank, each padded to C rows.
  const int64_t tokens = g.routed_tokens_per_micro_batch();
  const int64_t padded = 16 * g.routing->expert_capacity(tokens);
  int gemms = 0, all_to_alls = 0;
  for (const json& e : events_with(trace, "X")) {
    const json& args = e.at("args");
    if (e.at("cat") == "grouped_gemm" && args.at("layer").get<int64_t>() > 0) {
      REQUIRE(args.contains("rows"));
      CHECK(args.at("rows").get<double>() == static_cast<double>(padded));
      CHECK(args.at("rows_expected") == padded);
      ++gemms;
    } else if (e.at("cat") == "all_to_all") {
      // Padding sends fixed buffers: the op's own size, whatever the skewed draw.
      REQUIRE(args.contains("routed_bytes"));
      CHECK(args.at("routed_bytes").get<double>() == doctest::Approx(args.at("bytes").get<double>()));
      ++all_to_alls;
    } else {
      CHECK_FALSE(args.contains("rows"));
      CHECK_FALSE(args.contains("routed_bytes"));
    }
  }
  CHECK(gemms > 0);
  CHECK(all_to_alls > 0);

  // Dropless under the same skew: the busiest rank's GEMMs hold more than the expected T k rows.
  const std::string dropless = R"({"name": "trace-skew", "model": "qwen3-30b-a3b", "hardware": "h200-hgx",
    "num_devices": 8, "training": {"mode": "pretrain"},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1, "sequence_length": 1024},
    "parallel": {"fsdp": {"shard": 8, "replicate": 1}, "ep": 8},
    "routing": {"distribution": "skewed", "skew": 1.0}})";
  const Scenario s2 = load_scenario(InputText{"t.json", dropless, false});
  const StepGraph g2 = build_step_graph(s2);
  const StepResult r2 = Engine(g2, CostModel(s2.hardware)).run(o);
  double most = 0;
  for (const json& e : events_with(json::parse(chrome_trace_json(g2, r2.timeline, {})), "X")) {
    if (e.at("cat") != "grouped_gemm" || !e.at("args").contains("rows")) continue;
    CHECK(e.at("args").at("rows_expected") == tokens * 8);
    most = std::max(most, e.at("args").at("rows").get<double>());
  }
  CHECK(most > 1.2 * static_cast<double>(tokens * 8));
}

TEST_CASE("memory CSV: header, then one exact line per sample") {
  const Fixture f = make_fixture();
  Timeline t = f.timeline;
  t.memory.push_back({7, 1, 123456789.25, 8.5e10, 2e11});
  CHECK(memory_csv(t) ==
        "rank,time_s,hbm_bytes,ddr_bytes,hbm_reserved_bytes\n"
        "0,0,1500000000,0,0\n"
        "0,0.000001234567,2250000000,500000000,0\n"
        "1,0,1500000000,0,0\n"
        "1,0.000001500001,3000000000,1,0\n"
        "7,0.000000000001,123456789.25,85000000000,200000000000\n");
  CHECK(memory_csv(Timeline{}) == "rank,time_s,hbm_bytes,ddr_bytes,hbm_reserved_bytes\n");
}

TEST_CASE("trace: a million records") {
  // Every op of program 0 on all 8 ranks, back to back, until a million records: the size of a
  // large step. Checks the event count from the text (parsing 200 MB in a test would dominate) and
  // reports the time; the target is well under a second in an optimised build.
  const Program& p = graph().programs[0];
  Timeline t;
  constexpr size_t kNumRecords = 1'000'000;
  t.records.reserve(kNumRecords);
  Picoseconds now = 0;
  for (uint32_t i = 0; t.records.size() < kNumRecords; i = (i + 1) % static_cast<uint32_t>(p.ops.size())) {
    for (int32_t rank = 0; rank < 8 && t.records.size() < kNumRecords; ++rank) {
      t.records.push_back({rank, 0, i, p.ops[i].stream, now, now + 1'234'567});
    }
    now += 1'234'567;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string text = chrome_trace_json(graph(), t, TraceOptions{.max_ranks = 8});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("1M records: ", seconds, " s, ", static_cast<double>(text.size()) / 1e6, " MB");
  size_t num_x = 0;
  for (size_t pos = text.find("\"ph\":\"X\""); pos != std::string::npos; pos = text.find("\"ph\":\"X\"", pos + 1)) ++num_x;
  CHECK(num_x == kNumRecords);
}
