// SPDX-License-Identifier: MIT
// PyTorch profiler traces (src/trace/): the reader on the shipped traces of the harness
// (tests/data/traces/, recorded on an H200 by tools/trace_harness/harness.py) and on malformed
// text; the matcher's bookkeeping (every kernel of a step goes to exactly one op or one unmatched
// line); the rules tables against docs/calibration/from-trace.md; and the fit: the cost model with
// the fitted calibration gives back the measured time of the ops at each calibration point.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <sstream>
#include <string>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "cost/calibration.hpp"
#include "cost/cost_model.hpp"
#include "scenario/scenario_spec.hpp"
#include "trace/kineto_trace.hpp"
#include "trace/trace_fit.hpp"
#include "trace/trace_match.hpp"
#include "trace/trace_rules.hpp"

using namespace moesim;

namespace {

const char* kDense = "tests/data/traces/dense-s4096-mb2.rank0.json.gz";
const char* kMoe = "tests/data/traces/moe-s4096-mb2.rank0.json.gz";

struct Loaded {
  Scenario scenario;
  StepGraph graph;
  KinetoTrace trace;
  TraceMatch match;
};

Loaded load(const char* trace, const char* scenario) {
  Loaded l{load_scenario(read_input(scenario, "scenarios", "SCENARIO")), {}, read_kineto_trace(trace), {}};
  l.graph = build_step_graph(l.scenario);
  l.match = match_trace(l.trace, l.graph);
  return l;
}

std::string error_of(const std::string& text) {
  try {
    (void)parse_kineto_trace(text, "t.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("glob patterns: '*' only, case-insensitive, anchored at both ends") {
  CHECK(glob_match("*nccl*allgather*", "ncclDevKernel_AllGather_RING_LL"));
  CHECK(glob_match("nvjet*", "NVJET_sm90"));
  CHECK_FALSE(glob_match("nvjet*", "x_nvjet"));
  CHECK_FALSE(glob_match("*gemm", "gemm_kernel"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("a*b*c", "aXXbYYc"));
  CHECK_FALSE(glob_match("a*b*c", "aXXbYY"));
}

TEST_CASE("every kernel rule's example is classified by its own row (no earlier row shadows it)") {
  for (const KernelRule& r : kKernelRules) {
    INFO(r.pattern);
    CHECK(classify_kernel(r.example, GpuActivity::kernel) == r.cls);
  }
  CHECK(classify_kernel("whatever", GpuActivity::memcpy) == KernelClass::copy);
  CHECK(classify_kernel("whatever", GpuActivity::memset) == KernelClass::memset);
  CHECK(classify_kernel("void at::native::sbtopk::gatherTopK<float>", GpuActivity::kernel) == KernelClass::other);
  CHECK(range_meaning("FSDP::pre_forward (layers.0)") == RangeMeaning::data_parallel);
  CHECK(range_meaning("FSDP::post_backward_reduce (layers.0)") == RangeMeaning::data_parallel);
  CHECK(range_meaning("Optimizer.step#AdamW.step") == RangeMeaning::optimizer);
  CHECK(range_meaning("layer1.attn.rope") == RangeMeaning::unknown);
}

TEST_CASE("docs/calibration/from-trace.md prints the rules tables row for row") {
  std::ifstream in("docs/calibration/from-trace.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string page = ss.str();
  // Rows read "| `PATTERN` | class |" in the kernel table and "| `PATTERN` | meaning |" in the range table.
  auto rows_of = [&](const std::string& begin, const std::string& end) {
    std::vector<std::pair<std::string, std::string>> rows;
    const size_t a = page.find(begin), b = page.find(end);
    REQUIRE(a != std::string::npos);
    REQUIRE(b != std::string::npos);
    std::istringstream lines(page.substr(a, b - a));
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("| `")) continue;
      const size_t p0 = 3, p1 = line.find('`', p0);
      const size_t c0 = line.find("| ", p1) + 2, c1 = line.find(" |", c0);
      rows.emplace_back(line.substr(p0, p1 - p0), line.substr(c0, c1 - c0));
    }
    return rows;
  };
  const auto kernel_rows = rows_of("<!-- kernel rules -->", "<!-- end kernel rules -->");
  REQUIRE(kernel_rows.size() == kKernelRules.size());
  for (size_t i = 0; i < kKernelRules.size(); ++i) {
    CHECK(kernel_rows[i].first == kKernelRules[i].pattern);
    CHECK(kernel_rows[i].second == kernel_class_name(kKernelRules[i].cls));
  }
  const auto range_rows = rows_of("<!-- range rules -->", "<!-- end range rules -->");
  REQUIRE(range_rows.size() == kRangeRules.size());
  const char* meanings[] = {"op", "optimizer", "data_parallel", "framework", "step", "unknown"};
  for (size_t i = 0; i < kRangeRules.size(); ++i) {
    CHECK(range_rows[i].first == kRangeRules[i].pattern);
    CHECK(range_rows[i].second == meanings[static_cast<int>(kRangeRules[i].meaning)]);
  }
}

TEST_CASE("the reader on the shipped dense trace: its steps, kernels, launches and memory") {
  const KinetoTrace t = read_kineto_trace(kDense);
  CHECK(t.rank == 0);
  CHECK(t.device == 0);
  CHECK(t.num_devices_seen == 1);
  REQUIRE(t.steps.size() == 2);
  CHECK(t.names[t.steps[0].name] == "ProfilerStep#1");
  CHECK(t.names[t.steps[1].name] == "ProfilerStep#2");
  // 2 steps x 1,305 GPU activities (kernels, copies, sets) in them, as the harness printed.
  int64_t in_steps = 0;
  for (const TraceKernel& k : t.kernels) {
    if (k.ts_us >= t.steps.front().ts_us && k.ts_us <= t.steps.back().end_us()) ++in_steps;
  }
  CHECK(in_steps == 2 * 1305);
  CHECK(t.kernels.size() == 2610);
  CHECK(!t.memory.empty());
  for (size_t i = 1; i < t.kernels.size(); ++i) CHECK(t.kernels[i - 1].ts_us <= t.kernels[i].ts_us);
  // Every kernel has a launch on a host thread (cudaLaunchKernel or a driver call).
  std::map<int64_t, int> launches;
  for (const TraceLaunch& l : t.launches) ++launches[l.correlation];
  int64_t launched = 0;
  for (const TraceKernel& k : t.kernels) launched += launches.contains(k.correlation);
  CHECK(launched == static_cast<int64_t>(t.kernels.size()));
}

TEST_CASE("matching the dense trace: every kernel goes to one op or one unmatched line; GEMMs to GEMM ops") {
  const Loaded l = load(kDense, "scenarios/trace/dense-s4k-mb2.json");
  const TraceMatch& m = l.match;
  REQUIRE(m.steps.size() == 2);
  CHECK(m.num_kernels == 2610);
  int64_t counted = m.num_matched_kernels;
  double seconds = m.matched_seconds;
  for (const Unmatched& u : m.unmatched) {
    counted += u.num_kernels;
    seconds += u.seconds;
  }
  CHECK(counted == m.num_kernels);
  CHECK(seconds == doctest::Approx(m.kernel_seconds).epsilon(1e-12));
  double op_seconds = 0;
  for (const auto& [name, o] : m.ops) op_seconds += o.seconds;
  CHECK(op_seconds == doctest::Approx(m.matched_seconds).epsilon(1e-12));
  // Each forward and backward op of the 4 layers: one range per micro-batch (2), with kernels.
  for (int layer = 1; layer <= 4; ++layer) {
    for (const char* op : {"attn.q_proj", "attn.flash_attention", "ffn.up_proj", "ffn.down_proj", "attn_norm"}) {
      for (const char* suffix : {"", ".bwd"}) {
        const std::string name = "layer" + std::to_string(layer) + "." + op + suffix;
        INFO(name);
        const OpMeasure& o = m.ops.at(name);
        CHECK(o.num_ops == 2);
        CHECK(o.ranges_per_step == 2);
        CHECK(o.num_kernels > 0);
        CHECK(o.seconds > 0);
      }
    }
  }
  // The harness's RoPE (two ranges, q and k) is the graph's attn.rope op under elementwise eager.
  CHECK(m.ops.at("layer1.attn.rope").ranges_per_step == 4);
  for (const Unmatched& u : m.unmatched) CHECK(u.what.find("rope") == std::string::npos);
  // No collective over more than one rank on one GPU: nothing NCCL in the trace, no comm op matched.
  for (const auto& [name, o] : m.ops) CHECK((!is_communication(o.kind) || o.num_kernels == 0));
  // The GPU span of a step bounds its busy time, which bounds the kernels' summed time from below.
  double mean_busy = 0;
  for (const StepMeasure& s : m.steps) {
    CHECK(s.gpu_busy_s <= s.gpu_span_s);
    mean_busy += s.gpu_busy_s / 2;
  }
  CHECK(mean_busy <= m.kernel_seconds * (1 + 1e-9));
  CHECK(mean_busy > 0.9 * m.kernel_seconds);  // one stream: kernels hardly overlap
  CHECK(m.peak_allocated_bytes > 1e9);
  CHECK(m.peak_reserved_bytes >= m.peak_allocated_bytes);
  // Pinned from this trace (a change to the rules or the reader shows here): kernels matched and
  // the GPU step time (median over the 2 steps).
  // 1,212 in the ops' ranges; RoPE's 4 layers x 2 micro-batches x (2 x 8 forward + 2 x 12 backward)
  // kernels in each of the 2 steps; 690 of FSDP2's hooks.
  CHECK(m.num_matched_kernels == 1212 + 2 * 4 * 2 * 40 + 690);
  CHECK(m.step_seconds() == doctest::Approx(0.0872).epsilon(0.02));
}

TEST_CASE("FSDP2's hooks in the shipped traces go to the scenario's copy ops, kernel counts as FSDP2 launches them") {
  // Over one rank FSDP2 unshards a unit with a cast and a copy per parameter tensor (35: 8 per
  // layer, and the embedding, final norm and output projection of the root unit these traces were
  // recorded with), in forward and again in backward; its reduction launches a metadata copy, the
  // copy-in and the copy to the output per unit (5), then one add per tensor from the second
  // micro-batch. Per step of M micro-batches: 2 x 2 x 35 M and 3 x 5 M + 35 (M - 1).
  for (const auto& [trace, scenario, micro] : {std::tuple{kDense, "scenarios/trace/dense-s4k-mb2.json", 2},
                                               std::tuple{"tests/data/traces/dense-s8192-mb1.rank0.json.gz",
                                                          "scenarios/trace/dense-s8k-mb1.json", 1}}) {
    CAPTURE(trace);
    const Loaded l = load(trace, scenario);
    const TraceMatch& m = l.match;
    const int64_t steps = 2, tensors = 35, units = 5;
    const int64_t params_side = steps * 2 * 2 * tensors * micro;
    const int64_t grads_side = steps * (3 * units * micro + tensors * (micro - 1));
    int64_t copy_ops = 0;
    for (const auto& [name, o] : m.ops) {
      if (o.kind != OpKind::dp_copy && o.kind != OpKind::grad_accumulate) continue;
      ++copy_ops;
      const bool params = name.find(".fsdp_copy_") != std::string::npos;
      CHECK(o.num_kernels == (params ? params_side : grads_side));
      CHECK(o.seconds > 0);
    }
    CHECK(copy_ops > 0);
    for (const Unmatched& u : m.unmatched) CHECK(u.what.find("FSDP") == std::string::npos);
  }
}

TEST_CASE("matching is deterministic") {
  const Loaded a = load(kMoe, "scenarios/trace/moe-s4k-mb2.json");
  const TraceMatch b = match_trace(a.trace, a.graph);
  REQUIRE(a.match.ops.size() == b.ops.size());
  for (const auto& [name, o] : a.match.ops) {
    CHECK(o.seconds == b.ops.at(name).seconds);
    CHECK(o.num_kernels == b.ops.at(name).num_kernels);
  }
  REQUIRE(a.match.unmatched.size() == b.unmatched.size());
  for (size_t i = 0; i < b.unmatched.size(); ++i) CHECK(a.match.unmatched[i].what == b.unmatched[i].what);
  // The MoE slice's grouped GEMMs (torch._grouped_mm's CUTLASS kernels) are inside their ranges.
  CHECK(a.match.ops.at("layer2.moe.experts.up_proj").num_kernels > 0);
  CHECK(a.match.ops.at("layer2.moe.experts.down_proj.bwd").num_kernels > 0);
  CHECK(a.match.ops.at("layer2.moe.router").num_kernels > 0);
}

TEST_CASE("the fit: the fitted calibration gives back the measured time of the ops at each point") {
  const Loaded l = load(kMoe, "scenarios/trace/moe-s4k-mb2.json");
  const CostModel cost(l.scenario.hardware);
  const TraceFit fit = fit_calibration_from_traces({{&l.match, &l.graph, &cost, "moe-s4k-mb2", {}}}, "test");
  const nlohmann::json j = nlohmann::json::parse(fit.json);
  CHECK(j["format"] == "moesim-calibration");
  CHECK(j["version"] == 6);
  CHECK(j["kernels"].contains("gemm"));
  CHECK(j["kernels"].contains("grouped_gemm"));
  CHECK(j["kernels"].contains("memory"));
  // Memory-bound kernels also by kind and pass: norms, activations, the permutes, the loss, copies.
  for (const char* kind : {"norm", "activation", "permute", "unpermute", "cross_entropy", "dp_copy"}) {
    INFO(kind);
    CHECK(j["kernels"]["memory_by_kind"][kind].contains("forward"));
    CHECK(j["kernels"]["memory_by_kind"][kind].contains("backward"));
  }
  CHECK(j["attention"]["flash_attention"].contains("forward"));
  CHECK(j["attention"]["flash_attention"].contains("backward"));
  // Norms also by the width they normalise: Qwen3's QK-norm per 128-element head, the layer norms
  // over the 2,048-element hidden state; each width's table holds exactly its norms' sizes.
  std::map<int64_t, std::set<double>> norm_bytes;  // width -> forward bytes of its norm ops
  for (const Op& op : l.graph.programs[0].ops) {
    if (op.kind == OpKind::norm && op.phase == Phase::fwd) norm_bytes[op.k].insert(op.bytes_read + op.bytes_written);
  }
  REQUIRE(norm_bytes.size() == 2);
  for (const auto& [width, bytes] : norm_bytes) {
    INFO(width);
    CHECK((width == 128 || width == 2048));
    const auto& points = j["kernels"]["memory_by_kind"]["norm:" + std::to_string(width)]["forward"]["points"];
    std::set<double> xs;
    for (const auto& pt : points) xs.insert(pt[0].get<double>());
    CHECK(xs == bytes);
  }

  Scenario s = l.scenario;
  s.hardware.calibration_input = InputText{"fitted.json", fit.json, false};
  s.hardware.calibration_json = std::make_shared<const nlohmann::json>(j);
  const CostModel fitted(s.hardware);
  REQUIRE(fitted.calibration() != nullptr);
  // Per table point: the ops there, costed with the fitted file, take together what they measured.
  const Program& p = l.graph.programs[0];
  std::map<std::string, std::pair<double, double>> by_point;  // "table x" -> (measured, predicted)
  std::map<std::string, int> ops_at;
  int64_t checked = 0;
  for (const auto& [name, o] : l.match.ops) {
    if (o.num_kernels == 0 || o.kind == OpKind::optimizer) continue;
    const Op* op = nullptr;
    for (const Op& x : p.ops) {
      if (p.name_of(x) == name) {
        op = &x;
        break;
      }
    }
    REQUIRE(op != nullptr);
    if (!(o.per_op_seconds() > cost.hardware().device.kernel_launch_overhead.value)) continue;
    const auto [curve, x] = cost.curve_of(*op);
    std::string key;
    if (is_calibrated_attention_kind(op->kind)) {
      key = "attention " + std::string(op->phase == Phase::bwd ? "bwd " : "fwd ") + std::to_string(op->m);
    } else if (curve == CostModel::Curve::gemm || curve == CostModel::Curve::grouped_gemm) {
      key = (curve == CostModel::Curve::gemm ? "gemm " : "grouped ") + std::to_string(x);
    } else {  // its kind's table (kernels/memory_by_kind), by width (norms) and pass
      key = "memory " + std::string(enum_name(op->kind)) + ":" + std::to_string(memory_table_width(*op)) +
            (op->phase == Phase::bwd ? " bwd " : " fwd ") + std::to_string(op->bytes_read + op->bytes_written);
    }
    by_point[key].first += o.per_op_seconds();
    by_point[key].second += fitted.kernel_seconds(*op);
    ++ops_at[key];
    ++checked;
  }
  CHECK(checked > 30);
  for (const auto& [key, mp] : by_point) {
    INFO(key);
    CHECK(mp.second == doctest::Approx(mp.first).epsilon(1e-9));
  }
  // Why by kind: in this trace ops of different kinds move equal bytes at rates far apart, which a
  // table by bytes alone would average (and then give neither its measured time).
  std::map<std::string, std::vector<double>> rate_at_bytes;  // "bytes" -> each kind's mean time per op there
  for (const auto& [key, mp] : by_point) {
    if (key.rfind("memory ", 0) != 0) continue;
    rate_at_bytes[key.substr(key.rfind(' ') + 1)].push_back(mp.first / ops_at.at(key));
  }
  bool apart = false;
  for (const auto& [bytes, times] : rate_at_bytes) {
    const auto [lo, hi] = std::minmax_element(times.begin(), times.end());
    apart = apart || *hi > 1.2 * *lo;
  }
  CHECK(apart);
}

TEST_CASE("the fit in a power state: compute points are taken back to the limit's rate, memory-bound ones kept") {
  const Loaded l = load(kMoe, "scenarios/trace/moe-s4k-mb2.json");
  const CostModel cost(l.scenario.hardware);
  PowerState state;
  state.solved = true;
  state.rate = {1.2, 0.9, 1.0};
  const auto plain = nlohmann::json::parse(fit_calibration_from_traces({{&l.match, &l.graph, &cost, "a", {}}}, "test").json);
  const auto in_state = nlohmann::json::parse(fit_calibration_from_traces({{&l.match, &l.graph, &cost, "a", state}}, "test").json);
  auto points = [](const nlohmann::json& t) { return t["points"]; };
  auto same_scaled = [&](const nlohmann::json& a, const nlohmann::json& b, double factor) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(b[i][0].get<double>() == a[i][0].get<double>());
      CHECK(b[i][1].get<double>() == doctest::Approx(a[i][1].get<double>() / factor));
    }
  };
  same_scaled(points(plain["kernels"]["gemm"]), points(in_state["kernels"]["gemm"]), 1.2);
  same_scaled(points(plain["kernels"]["grouped_gemm"]), points(in_state["kernels"]["grouped_gemm"]), 1.2);
  same_scaled(points(plain["attention"]["flash_attention"]["forward"]), points(in_state["attention"]["flash_attention"]["forward"]), 0.9);
  same_scaled(points(plain["kernels"]["memory"]), points(in_state["kernels"]["memory"]), 1.0);
  CHECK(in_state["provenance"]["traces"][0]["power_state"]["rate"]["gemm"] == 1.2);
  // The trace's activity adds up to its step: busy classes and idle at least the GPU span.
  const StepActivity a = measured_activity(l.match);
  CHECK(a.busy[0] + a.busy[1] + a.busy[2] + a.idle >= 0.99 * l.match.step_seconds());
  CHECK(a.busy[static_cast<size_t>(PowerClass::gemm)] > 0);
}

TEST_CASE("the fit: CCE loss ops go to kernels/cce by pass at their hidden size and get their measured time back") {
  // Measured times of the CCE ops alone (no shipped trace has a CCE loss): the Qwen3 slice's head
  // trains (backward), the K3 slice's is frozen under LoRA (backward_frozen).
  for (const auto& [file, hidden, bwd_pass] : {std::tuple{"scenarios/calibration/qwen3-moe-slice-1gpu.json", 2048, "backward"},
                                               std::tuple{"scenarios/calibration/k3-slice-1gpu.json", 7168, "backward_frozen"}}) {
    CAPTURE(file);
    const Scenario s = load_scenario(read_input(file, "scenarios", "SCENARIO"));
    const StepGraph g = build_step_graph(s);
    const Program& p = g.programs[0];
    const CostModel cost(s.hardware);
    TraceMatch m;
    m.trace_file = "cce.json";
    const std::map<std::string, double> per_op = {{"loss.cce", 0.010}, {"loss.cce.recompute", 0.011}, {"loss.cce.bwd", 0.019}};
    for (const Op& op : p.ops) {
      if (op.kind != OpKind::cce_loss) continue;
      OpMeasure& o = m.ops[p.name_of(op)];
      o.name = p.name_of(op);
      o.kind = op.kind;
      o.phase = op.phase;
      ++o.num_ops;
      o.seconds += per_op.at(o.name);
      o.num_kernels += 2 * op.num_groups;
    }
    REQUIRE(m.ops.size() == 3);
    const TraceFit fit = fit_calibration_from_traces({{&m, &g, &cost, "cce", {}}}, "test");
    const nlohmann::json j = nlohmann::json::parse(fit.json);
    CHECK(!j["kernels"].contains("gemm"));  // not on the GEMM table any more
    REQUIRE(j["kernels"]["cce"].contains("forward"));
    REQUIRE(j["kernels"]["cce"].contains(bwd_pass));
    CHECK(j["kernels"]["cce"].size() == 2);
    CHECK(j["kernels"]["cce"]["forward"]["measure"] == "hidden_size");
    CHECK(j["kernels"]["cce"]["forward"]["points"].size() == 1);
    CHECK(j["kernels"]["cce"]["forward"]["points"][0][0] == hidden);
    CHECK(j["kernels"]["cce"][bwd_pass]["points"][0][0] == hidden);

    Scenario fitted_s = s;
    fitted_s.hardware.calibration_input = InputText{"fitted.json", fit.json, false};
    fitted_s.hardware.calibration_json = std::make_shared<const nlohmann::json>(j);
    const CostModel fitted(fitted_s.hardware);
    // The forward point holds the fwd and recompute ops together (their summed time); bwd its own.
    double fwd_measured = 0, fwd_predicted = 0;
    for (const auto& [name, o] : m.ops) {
      const Op* op = nullptr;
      for (const Op& x : p.ops) {
        if (p.name_of(x) == name) op = &x;
      }
      REQUIRE(op != nullptr);
      if (op->phase == Phase::bwd) {
        CHECK(fitted.kernel_seconds(*op) == doctest::Approx(o.per_op_seconds()).epsilon(1e-12));
      } else {
        fwd_measured += o.per_op_seconds();
        fwd_predicted += fitted.kernel_seconds(*op);
      }
    }
    CHECK(fwd_predicted == doctest::Approx(fwd_measured).epsilon(1e-12));
  }
}

TEST_CASE("collectives: NCCL kernels go to the scenario's collectives of their kind in issue order") {
  // The dense slice over 2 ranks (FSDP2 shard 2): rank 0's all-gathers and reduce-scatters get one
  // synthetic NCCL kernel each, in program order, plus one all-gather too many.
  nlohmann::json sc = nlohmann::json::parse(read_input("scenarios/trace/dense-s4k-mb2.json", "scenarios", "S").text);
  sc["name"] = "dense-2ranks";
  sc["num_devices"] = 2;
  sc["parallel"]["fsdp"]["shard"] = 2;
  sc["batch"]["global_batch_size"] = 4;
  const Scenario s = load_scenario(InputText{"scenarios/trace/dense-2ranks.json", sc.dump(), false});
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs[0];
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#1"}, {"pid", 1}, {"tid", 1},
                    {"ts", 0.0}, {"dur", 1e6}});
  std::map<std::string, double> want;  // op name -> seconds (ops of one name: one per micro-batch)
  std::map<std::string, int64_t> count;
  std::map<OpKind, int> num_of;
  double ts = 10;
  int64_t corr = 1;
  auto kernel = [&](const std::string& name, double dur_us, double elements = -1) {
    events.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", 1},
                      {"ts", ts}, {"dur", 1.0}, {"args", {{"correlation", corr}}}});
    nlohmann::json args = {{"device", 0}, {"stream", 20}, {"correlation", corr}};
    if (elements > 0) {
      args["Collective name"] = "allgather";
      args["In msg nelems"] = elements / 2;
      args["Out msg nelems"] = elements;
      args["dtype"] = "BFloat16";
    }
    events.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", 0}, {"tid", 20}, {"ts", ts + 2},
                      {"dur", dur_us}, {"args", args}});
    ++corr;
    ts += dur_us + 10;
  };
  // A small all-gather first (a framework's own, 16 bytes): its recorded size is no collective's.
  kernel("ncclDevKernel_AllGather_RING_LL", 3, 8);
  for (const Op& op : p.ops) {
    if (!is_collective(op.kind) || g.plan.group_size(op.group) < 2) continue;
    const double dur_us = 50.0 + 10.0 * num_of[op.kind]++;
    kernel(op.kind == OpKind::all_gather ? "ncclDevKernel_AllGather_RING_LL" : "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
           dur_us);
    want[p.name_of(op)] += dur_us * 1e-6;
    ++count[p.name_of(op)];
  }
  REQUIRE(num_of[OpKind::all_gather] > 4);
  REQUIRE(num_of[OpKind::reduce_scatter] > 4);
  kernel("ncclDevKernel_AllGather_RING_LL", 7);  // beyond the scenario's
  const KinetoTrace t = parse_kineto_trace(nlohmann::json{{"traceEvents", events}}.dump(), "nccl.json");
  const TraceMatch m = match_trace(t, g);
  for (const auto& [name, sec] : want) {
    INFO(name);
    CHECK(m.ops.at(name).seconds == doctest::Approx(sec).epsilon(1e-12));
    CHECK(m.ops.at(name).num_kernels == count.at(name));
  }
  REQUIRE(m.unmatched.size() == 2);
  CHECK(m.unmatched[0].what == "all_gather kernels beyond the scenario's collectives");
  CHECK(m.unmatched[0].num_kernels == 1);
  CHECK(m.unmatched[1].what == "all_gather kernels of no collective of the scenario (size)");
  CHECK(m.unmatched[1].num_kernels == 1);
  // The fit puts each collective at its nccl-tests size: busbw = (n-1)/n x size / time.
  const CostModel cost(s.hardware);
  const TraceFit fit = fit_calibration_from_traces({{&m, &g, &cost, "dense-2ranks", {}}}, "test");
  const nlohmann::json j = nlohmann::json::parse(fit.json);
  REQUIRE(j["collectives"]["all_gather"].contains("2"));
  REQUIRE(j["collectives"]["reduce_scatter"].contains("2"));
  for (const auto& sample : j["collectives"]["all_gather"]["2"]["samples"]) {
    const std::string op = sample["op"];
    const double bytes = sample["x"];
    const double per_op = want.at(op) / static_cast<double>(count.at(op));
    CHECK(sample["y"].get<double>() == doctest::Approx(0.5 * bytes / per_op).epsilon(1e-12));
  }
}

TEST_CASE("malformed traces are input errors naming the file and the JSON path") {
  CHECK(error_of("{\"traceEvents\": [") .starts_with("t.json: invalid JSON at line 1"));
  CHECK(error_of("[]") == "t.json: must be a JSON object (a Chrome trace with \"traceEvents\")");
  CHECK(error_of("{}") == "t.json: /traceEvents: missing: not a Chrome/Kineto trace");
  CHECK(error_of("{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, "
                 "\"ts\": 1, \"dur\": \"2\"}]}") == "t.json: /traceEvents/0/dur: must be a number");
  CHECK(error_of("{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": 5, \"pid\": 0, \"tid\": 7, "
                 "\"ts\": 1, \"dur\": 2}]}") == "t.json: /traceEvents/0/name: must be a string");
  CHECK(error_of("{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\"}]}")
            .starts_with("t.json: /traceEvents: holds no GPU kernels"));
  // gzip: a valid stream inflates; one cut short is refused.
  const std::string text = "{\"traceEvents\": []}";
  std::string gz(256, '\0');
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(gz.data());
  z.avail_out = static_cast<uInt>(gz.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  gz.resize(gz.size() - z.avail_out);
  deflateEnd(&z);
  CHECK(gunzip(gz, "t.gz") == text);
  CHECK(gunzip(gz + gz, "t.gz") == text + text);  // concatenated members
  try {
    (void)gunzip(gz.substr(0, gz.size() / 2), "t.gz");
    FAIL("a truncated stream was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).starts_with("t.gz: truncated gzip data"));
  }
}
