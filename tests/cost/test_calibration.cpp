// SPDX-License-Identifier: MIT
// Calibration tables (log-linear interpolation: exact at grid points, monotone between, clamped
// outside), the calibration file reader's errors, and the cost model using a calibration file that
// a hardware file names: a grid shape costs exactly the table's time.
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.hpp"
#include "cost/calibration.hpp"
#include "cost/cost_model.hpp"
#include "graph/step_graph.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;
using nlohmann::json;

namespace {

json sample_calibration() {
  return json{
      {"format", "moesim-calibration"},
      {"version", 1},
      {"provenance", {{"gpu", "test"}}},
      {"kernels",
       {{"gemm", {{"measure", "min_mnk"}, {"value", "flops_per_s"}, {"dtype", "bf16"},
                  {"points", {{128, 200e12}, {1024, 600e12}, {8192, 780e12}}}}},
        {"grouped_gemm", {{"measure", "rows_per_group"}, {"value", "flops_per_s"},
                          {"points", {{64, 150e12}, {4096, 700e12}}}}},
        {"memory", {{"measure", "bytes"}, {"value", "bytes_per_s"}, {"points", {{1e6, 1e12}, {1e9, 4e12}}}}}}},
      {"host_copy",
       {{"h2d", {{"measure", "bytes"}, {"value", "bytes_per_s"}, {"points", {{65536, 10e9}, {1073741824, 55e9}}}}},
        {"d2h", {{"measure", "bytes"}, {"value", "bytes_per_s"}, {"points", {{65536, 9e9}, {1073741824, 54e9}}}}}}},
      {"collectives",
       {{"all_reduce", {{"2", {{"measure", "bytes"}, {"value", "busbw_bytes_per_s"},
                               {"points", {{1048576, 22e9}, {1073741824, 330e9}}}}}}}}},
  };
}

InputText text(const json& j, const std::string& name = "cal.json") { return InputText{name, j.dump(), false}; }

// A copy of the shipped H200 hardware file naming `calibration`, both written to a fresh folder.
HardwareSpec hardware_with(const json& calibration) {
  const auto dir = std::filesystem::temp_directory_path() / ("moesim-cal-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "calibration");
  json hw = json::parse(read_input("h200-hgx", "hardware", "HARDWARE").text);
  hw["calibration"] = "calibration/test.json";
  std::ofstream(dir / "h200-test.json") << hw.dump();
  std::ofstream(dir / "calibration" / "test.json") << calibration.dump();
  HardwareSpec spec = load_hardware(read_input((dir / "h200-test.json").string(), "hardware", "HARDWARE"));
  std::filesystem::remove_all(dir);  // the spec holds the calibration's text
  return spec;
}

Op gemm(int64_t m, int64_t n, int64_t k) {
  Op op;
  op.kind = OpKind::gemm;
  op.dtype = Dtype::bf16;
  op.m = m;
  op.n = n;
  op.k = k;
  op.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  op.bytes_read = 2.0 * static_cast<double>(m * k + k * n);
  op.bytes_written = 2.0 * static_cast<double>(m * n);
  return op;
}

void expect_error(const json& j, const std::string& path, const std::string& fragment) {
  try {
    (void)load_calibration(text(j));
    FAIL("no error for " << path);
  } catch (const InputError& e) {
    CHECK(e.file() == "cal.json");
    CHECK(e.path() == path);
    CHECK(e.message().find(fragment) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("a table is exact at its grid points, monotone between them, and clamped outside") {
  const CalibrationTable t({{1, 10}, {4, 30}, {16, 35}, {64, 36}});
  for (const auto& [x, y] : t.points()) CHECK(t.at(x) == doctest::Approx(y).epsilon(1e-15));
  CHECK(t.at(2) == doctest::Approx(20));  // the geometric midpoint is the arithmetic mean: linear in log x
  double previous = t.at(1);
  for (double x = 1; x <= 64; x *= 1.01) {
    const double y = t.at(x);
    CHECK(y >= previous);
    previous = y;
  }
  CHECK(t.at(0.5) == 10);
  CHECK(t.at(0) == 10);
  CHECK(t.at(1e9) == 36);
  // A falling table (bandwidth past a cache size) interpolates monotonically too.
  const CalibrationTable down({{1, 9}, {10, 3}});
  CHECK(down.at(3) < down.at(2));
  CHECK(down.at(3) > 3);
}

TEST_CASE("the reader takes the tables it knows and names the file and JSON path of bad input") {
  const Calibration c = load_calibration(text(sample_calibration()));
  REQUIRE(c.gemm_flops_per_s);
  CHECK(c.gemm_flops_per_s->points().size() == 3);
  REQUIRE(c.collective(OpKind::all_reduce, 2) != nullptr);
  CHECK(c.collective(OpKind::all_reduce, 4) == nullptr);
  CHECK(c.collective(OpKind::all_gather, 2) == nullptr);

  json j = sample_calibration();
  j["version"] = 8;
  expect_error(j, "/version", "unsupported version");
  j = sample_calibration();
  j["version"] = 2;  // memory_overhead came with version 3
  j["memory_overhead"] = {{"runtime_bytes", 5e8}, {"communicator_bytes", {{"all_gather", 8e8}}}};
  expect_error(j, "/memory_overhead", "unknown key");
  j["version"] = 3;
  CHECK_NOTHROW(load_calibration(text(j)));
  j = sample_calibration();
  j["version"] = 0;
  expect_error(j, "/version", "unsupported version");
  j = sample_calibration();
  j["format"] = "something";
  expect_error(j, "/format", "moesim-calibration");
  j = sample_calibration();
  j["kernels"]["gemm"]["points"][1][0] = 100;
  expect_error(j, "/kernels/gemm/points/1/0", "increase strictly");
  j = sample_calibration();
  j["kernels"]["gemm"]["points"][2][1] = -1;
  expect_error(j, "/kernels/gemm/points/2/1", "positive");
  j = sample_calibration();
  j["kernels"]["gemm"]["measure"] = "m";
  expect_error(j, "/kernels/gemm/measure", "min_mnk");
  j = sample_calibration();
  j["kernels"]["attention"] = j["kernels"]["gemm"];
  expect_error(j, "/kernels/attention", "unknown key");
  j = sample_calibration();
  j["collectives"]["all_reduce"]["two"] = j["collectives"]["all_reduce"]["2"];
  expect_error(j, "/collectives/all_reduce/two", "integers >= 2");
  j = sample_calibration();
  j["collectives"]["broadcast"] = json::object();
  expect_error(j, "/collectives/broadcast", "unknown collective");
  j = sample_calibration();
  j["colectives"] = json::object();
  expect_error(j, "/colectives", "unknown key");
}

TEST_CASE("a hardware file with a calibration: grid shapes cost the table's time, the rest the curves") {
  const json cal = sample_calibration();
  const HardwareSpec hw = hardware_with(cal);
  REQUIRE(hw.calibration_input);
  const CostModel cost(hw);
  REQUIRE(cost.calibration() != nullptr);
  const double launch = hw.device.kernel_launch_overhead.value;

  // GEMM at a grid point of min(m, n, k): flops / table value (compute-bound at this size).
  const Op g = gemm(8192, 8192, 16384);  // min(m, n, k) = 8192, a grid point
  CHECK(cost.kernel_seconds(g) == doctest::Approx(g.flops / 780e12 + launch));
  const Op skinny = gemm(128, 7168, 7168);
  CHECK(cost.kernel_seconds(skinny) == doctest::Approx(std::max(skinny.flops / 200e12, (skinny.bytes_read + skinny.bytes_written) /
                                                                    cost.calibration()->memory_bytes_per_s->at(skinny.bytes_read + skinny.bytes_written)) +
                                                       launch));
  // Other dtypes keep the curve: FP8 is not in the (BF16) table.
  Op fp8 = g;
  fp8.dtype = Dtype::fp8;
  const CostModel plain(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  CHECK(cost.kernel_seconds(fp8) == doctest::Approx(plain.kernel_seconds(fp8)));

  Op grouped = gemm(14 * 4096, 6144, 3584);
  grouped.kind = OpKind::grouped_gemm;
  grouped.num_groups = 14;
  CHECK(cost.kernel_seconds(grouped) == doctest::Approx(grouped.flops / 700e12 + launch));

  Op norm;
  norm.kind = OpKind::norm;
  norm.bytes_read = 5e8;
  norm.bytes_written = 5e8;
  CHECK(cost.kernel_seconds(norm) == doctest::Approx(1e9 / 4e12 + launch));

  Op swap;
  swap.kind = OpKind::swap_in;
  swap.comm_bytes = 1073741824;
  CHECK(cost.kernel_seconds(swap) == doctest::Approx(1073741824 / 55e9));
  swap.kind = OpKind::swap_out;
  CHECK(cost.kernel_seconds(swap) == doctest::Approx(1073741824 / 54e9));

  // All-reduce over 2 GPUs of one domain at a grid size: S / algbw = 2 (n - 1) / n * S / busbw.
  const GroupPlacement two{2, 1, 2};
  const double s = 1073741824;
  CHECK(cost.collective(OpKind::all_reduce, s, two).seconds() == doctest::Approx(s / 330e9));
  // The smallest size's time is the fixed (unshared) part; at or below that size it is all of it.
  const double t0 = 1048576 / 22e9;
  CHECK(cost.collective(OpKind::all_reduce, s, two).latency_s == doctest::Approx(t0));
  const CollectiveCost tiny = cost.collective(OpKind::all_reduce, 65536, two);
  CHECK(tiny.seconds() == doctest::Approx(tiny.latency_s));
  CHECK(tiny.up_bytes == 0);
  CHECK(tiny.latency_s == doctest::Approx(65536 / 22e9));  // clamped busbw below the grid
  // Sizes between grid points are between the grid points' times per byte; a group size or kind
  // the file did not measure keeps the model.
  const double mid = cost.collective(OpKind::all_reduce, 32 << 20, two).seconds() / (32 << 20);
  CHECK(mid < 1 / 22e9);
  CHECK(mid > 1 / 330e9);
  const GroupPlacement four{4, 1, 4};
  CHECK(cost.collective(OpKind::all_reduce, s, four).seconds() ==
        doctest::Approx(plain.collective(OpKind::all_reduce, s, four).seconds()));
  CHECK(cost.collective(OpKind::all_gather, s, two).seconds() ==
        doctest::Approx(plain.collective(OpKind::all_gather, s, two).seconds()));
}

namespace {

// Version 2: attention tables by (kind, phase), FLOP/s by query rows.
json attention_calibration() {
  json j = sample_calibration();
  j["version"] = 2;
  const auto tab = [](double y0, double y1) {
    return json{{"measure", "query_rows"}, {"value", "flops_per_s"}, {"dtype", "bf16"},
                {"points", {{2048, y0}, {4096, 0.5 * (y0 + y1)}, {16384, y1}}}, {"samples", json::array()}};
  };
  j["attention"] = {{"sparse_attention", {{"forward", tab(40e12, 30e12)}, {"backward", tab(35e12, 25e12)}}},
                    {"kda", {{"forward", tab(8e12, 9e12)}}}};
  return j;
}

Op attention_op(OpKind kind, Phase phase, int64_t rows, double flops) {
  Op op;
  op.kind = kind;
  op.phase = phase;
  op.dtype = Dtype::bf16;
  op.m = rows;
  op.flops = flops;
  op.bytes_read = 1e6;  // compute-bound on the curves, so uncovered ops compare with the plain model
  op.bytes_written = 1e6;
  return op;
}

// A BF16 norm moving 1e9 bytes (the memory_by_kind tests' tables end there).
Op norm_op(Phase phase, int64_t width) {
  Op op;
  op.kind = OpKind::norm;
  op.dtype = Dtype::bf16;
  op.bytes_read = 6e8;
  op.bytes_written = 4e8;
  op.phase = phase;
  op.k = width;
  return op;
}

}  // namespace

TEST_CASE("version 2 attention tables: read, checked, and used per kind and phase by query rows") {
  const Calibration c = load_calibration(text(attention_calibration()));
  REQUIRE(c.attention_table(OpKind::sparse_attention, Phase::fwd) != nullptr);
  CHECK(c.attention_table(OpKind::sparse_attention, Phase::recompute) == c.attention_table(OpKind::sparse_attention, Phase::fwd));
  REQUIRE(c.attention_table(OpKind::sparse_attention, Phase::bwd) != nullptr);
  CHECK(c.attention_table(OpKind::sparse_attention, Phase::bwd) != c.attention_table(OpKind::sparse_attention, Phase::fwd));
  CHECK(c.attention_table(OpKind::kda, Phase::bwd) == nullptr);
  CHECK(c.attention_table(OpKind::dsa_indexer, Phase::fwd) == nullptr);

  // Version 1 files stay readable; "attention" is a version 2 key.
  json j = sample_calibration();
  j["attention"] = attention_calibration()["attention"];
  expect_error(j, "/attention", "unknown key");
  j = attention_calibration();
  j["attention"]["norm"] = j["attention"]["kda"];
  expect_error(j, "/attention/norm", "unknown attention op kind");
  j = attention_calibration();
  j["attention"]["kda"]["recompute"] = j["attention"]["kda"]["forward"];
  expect_error(j, "/attention/kda/recompute", "unknown key");
  j = attention_calibration();
  j["attention"]["kda"]["forward"]["measure"] = "min_mnk";
  expect_error(j, "/attention/kda/forward/measure", "query_rows");
  j = attention_calibration();
  j["attention"]["sparse_attention"]["backward"]["points"][2][1] = 0;
  expect_error(j, "/attention/sparse_attention/backward/points/2/1", "positive");

  const HardwareSpec hw = hardware_with(attention_calibration());
  const CostModel cost(hw);
  const CostModel plain(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  const double launch = hw.device.kernel_launch_overhead.value;
  const double f = 3e12;
  // Exact at grid points: forward (fwd and recompute) and backward tables apart.
  for (const auto& [rows, fwd, bwd] : {std::tuple{2048, 40e12, 35e12}, std::tuple{4096, 35e12, 30e12}, std::tuple{16384, 30e12, 25e12}}) {
    CAPTURE(rows);
    CHECK(cost.kernel_seconds(attention_op(OpKind::sparse_attention, Phase::fwd, rows, f)) == doctest::Approx(f / fwd + launch));
    CHECK(cost.kernel_seconds(attention_op(OpKind::sparse_attention, Phase::recompute, rows, f)) ==
          doctest::Approx(f / fwd + launch));
    CHECK(cost.kernel_seconds(attention_op(OpKind::sparse_attention, Phase::bwd, rows, f)) == doctest::Approx(f / bwd + launch));
  }
  // The unfused DSA key gather's table is bytes/s of the op's bytes read and written.
  {
    json g = attention_calibration();
    g["attention"]["kv_gather"]["forward"] = {{"measure", "query_rows"}, {"value", "bytes_per_s"}, {"dtype", "bf16"},
                                              {"points", {{2048, 1e12}, {16384, 2e12}}}, {"samples", json::array()}};
    const CostModel gathers(hardware_with(g));
    Op op = attention_op(OpKind::kv_gather, Phase::fwd, 16384, 0);
    op.bytes_read = 3e9;
    op.bytes_written = 3e9;
    CHECK(gathers.kernel_seconds(op) == doctest::Approx(6e9 / 2e12 + launch));
    g["attention"]["kv_gather"]["forward"]["value"] = "flops_per_s";
    expect_error(g, "/attention/kv_gather/forward/value", "bytes_per_s");
  }
  // Clamped outside the grid; between grid points between their rates.
  CHECK(cost.kernel_seconds(attention_op(OpKind::sparse_attention, Phase::fwd, 512, f)) == doctest::Approx(f / 40e12 + launch));
  CHECK(cost.kernel_seconds(attention_op(OpKind::sparse_attention, Phase::bwd, 131072, f)) == doctest::Approx(f / 25e12 + launch));
  const double mid = cost.kernel_seconds(attention_op(OpKind::sparse_attention, Phase::fwd, 8192, f)) - launch;
  CHECK(mid > f / 35e12);
  CHECK(mid < f / 30e12);
  // rows_scale scales the flops and the query rows alike.
  CHECK(cost.kernel_seconds(attention_op(OpKind::sparse_attention, Phase::fwd, 1024, f), 2.0) ==
        doctest::Approx(2 * f / 40e12 + launch));
  // What the file does not cover keeps the curves: another phase or kind, another dtype.
  for (const Op& op : {attention_op(OpKind::kda, Phase::bwd, 4096, f), attention_op(OpKind::dsa_indexer, Phase::fwd, 4096, f)}) {
    CHECK(cost.kernel_seconds(op) == doctest::Approx(plain.kernel_seconds(op)));
  }
  Op fp8 = attention_op(OpKind::sparse_attention, Phase::fwd, 4096, f);
  fp8.dtype = Dtype::fp8;
  CHECK(cost.kernel_seconds(fp8) == doctest::Approx(plain.kernel_seconds(fp8)));
  CHECK(cost.kernel_seconds(attention_op(OpKind::kda, Phase::fwd, 4096, f)) == doctest::Approx(f / 8.5e12 + launch));
}

namespace {

// kernels/cce: FLOP/s by hidden size per pass, two grid points each (1024 and 8192: 2048 lies a
// third of the way in log x, so the value there is y0 + (y1 - y0) / 3).
json cce_calibration() {
  json j = sample_calibration();
  const auto tab = [](double y0, double y1) {
    return json{{"measure", "hidden_size"}, {"value", "flops_per_s"}, {"dtype", "bf16"},
                {"points", {{1024, y0}, {8192, y1}}}, {"samples", json::array()}};
  };
  j["kernels"]["cce"] = {{"forward", tab(300e12, 600e12)}, {"backward", tab(250e12, 550e12)},
                         {"backward_frozen", tab(200e12, 500e12)}};
  return j;
}

// The cce_loss ops of a shipped scenario's rank-0 program, by name (fwd, recompute, bwd; the
// first micro-batch's).
std::map<std::string, Op> cce_ops(const char* scenario) {
  const StepGraph g = build_step_graph(load_scenario(read_input(scenario, "scenarios", "SCENARIO")));
  const Program& p = g.programs.front();
  std::map<std::string, Op> out;
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::cce_loss) out.try_emplace(p.name_of(op), op);
  }
  return out;
}

}  // namespace

TEST_CASE("kernels/cce tables: read per pass, checked, and used by hidden size for fwd, recompute and bwd") {
  const Calibration c = load_calibration(text(cce_calibration()));
  REQUIRE(c.cce.size() == 3);
  Op op;
  op.kind = OpKind::cce_loss;
  op.phase = Phase::fwd;
  CHECK(cce_pass_of(op) == CcePass::forward);
  CHECK(c.cce_table(op) == &c.cce.at(CcePass::forward));
  op.phase = Phase::recompute;  // the forward launch again
  CHECK(cce_pass_of(op) == CcePass::forward);
  op.phase = Phase::bwd;
  CHECK(cce_pass_of(op) == CcePass::backward_frozen);
  op.trainable_weight = true;
  CHECK(cce_pass_of(op) == CcePass::backward);
  CHECK(c.cce_table(op) == &c.cce.at(CcePass::backward));
  op.kind = OpKind::gemm;
  CHECK(c.cce_table(op) == nullptr);

  json j = cce_calibration();
  j["kernels"]["cce"]["recompute"] = j["kernels"]["cce"]["forward"];
  expect_error(j, "/kernels/cce/recompute", "unknown key");
  j = cce_calibration();
  j["kernels"]["cce"]["forward"]["measure"] = "min_mnk";
  expect_error(j, "/kernels/cce/forward/measure", "hidden_size");
  j = cce_calibration();
  j["kernels"]["cce"]["backward"]["value"] = "bytes_per_s";
  expect_error(j, "/kernels/cce/backward/value", "flops_per_s");
  j = cce_calibration();
  j["kernels"]["cce"]["backward_frozen"]["points"][1][1] = 0;
  expect_error(j, "/kernels/cce/backward_frozen/points/1/1", "positive");
  j = cce_calibration();
  j["kernels"]["cce"] = j["kernels"]["cce"]["forward"];  // a table where the passes belong
  expect_error(j, "/kernels/cce/dtype", "unknown key");
  j = cce_calibration();
  j["kernels"]["cce"] = json::array();
  expect_error(j, "/kernels/cce", "must be an object");

  // The closed form on the graph's own ops: t = flops / table(hidden) + one launch, per pass.
  const HardwareSpec hw = hardware_with(cce_calibration());
  const CostModel cost(hw);
  const double launch = hw.device.kernel_launch_overhead.value;
  {
    // Qwen3 slice (hidden 2048, full fine-tuning: the head trains).
    const auto ops = cce_ops("scenarios/calibration/qwen3-moe-slice-1gpu.json");
    REQUIRE(ops.size() == 3);
    const Op& fwd = ops.at("loss.cce");
    const Op& re = ops.at("loss.cce.recompute");
    const Op& bwd = ops.at("loss.cce.bwd");
    CHECK(fwd.k == 2048);
    CHECK(bwd.trainable_weight);
    CHECK(cost.kernel_seconds(fwd) == doctest::Approx(fwd.flops / 400e12 + launch).epsilon(1e-12));
    CHECK(cost.kernel_seconds(re) == doctest::Approx(re.flops / 400e12 + launch).epsilon(1e-12));
    CHECK(cost.kernel_seconds(bwd) == doctest::Approx(bwd.flops / 350e12 + launch).epsilon(1e-12));
    CHECK(bwd.flops == doctest::Approx(2 * fwd.flops));  // dh and dW
  }
  {
    // K3 slice (hidden 7168, LoRA without an lm_head adapter: the head is frozen).
    const auto ops = cce_ops("scenarios/calibration/k3-slice-1gpu.json");
    const Op& fwd = ops.at("loss.cce");
    const Op& bwd = ops.at("loss.cce.bwd");
    CHECK(fwd.k == 7168);
    CHECK(!bwd.trainable_weight);
    const double f = std::log(7168.0 / 1024) / std::log(8.0);
    CHECK(cost.kernel_seconds(fwd) == doctest::Approx(fwd.flops / (300e12 + f * 300e12) + launch).epsilon(1e-12));
    CHECK(cost.kernel_seconds(bwd) == doctest::Approx(bwd.flops / (200e12 + f * 300e12) + launch).epsilon(1e-12));
    CHECK(bwd.flops == doctest::Approx(fwd.flops));  // dh only
  }
  // Exact at grid points, clamped outside; the rows do not move the rate.
  Op grid = cce_ops("scenarios/calibration/qwen3-moe-slice-1gpu.json").at("loss.cce");
  for (const auto& [k, y] : {std::pair{512, 300e12}, std::pair{1024, 300e12}, std::pair{8192, 600e12}, std::pair{16384, 600e12}}) {
    CAPTURE(k);
    grid.k = k;
    CHECK(cost.kernel_seconds(grid) == doctest::Approx(grid.flops / y + launch).epsilon(1e-12));
    CHECK(cost.kernel_seconds(grid, 0.5) == doctest::Approx(0.5 * grid.flops / y + launch).epsilon(1e-12));
  }
  // Other dtypes keep the GEMM path (the tables are BF16).
  Op fp8 = grid;
  fp8.dtype = Dtype::fp8;
  const CostModel without(hardware_with(sample_calibration()));
  CHECK(cost.kernel_seconds(fp8) == doctest::Approx(without.kernel_seconds(fp8)));
}

TEST_CASE("without a kernels/cce table (or pass) the CCE ops keep today's cost: the GEMM table at min(n, k, rows)") {
  // A file with only the forward pass: the bwd ops keep the GEMM table, the fwd ops take the CCE table.
  json only_forward = cce_calibration();
  only_forward["kernels"]["cce"].erase("backward");
  only_forward["kernels"]["cce"].erase("backward_frozen");
  const HardwareSpec hw = hardware_with(sample_calibration());
  const CostModel without(hw);
  const CostModel partial(hardware_with(only_forward));
  const double launch = hw.device.kernel_launch_overhead.value;
  const CalibrationTable& gemm_table = *without.calibration()->gemm_flops_per_s;
  for (const char* scenario : {"scenarios/calibration/qwen3-moe-slice-1gpu.json", "scenarios/calibration/k3-slice-1gpu.json",
                               "scenarios/calibration/llama-8b-slice-1gpu.json"}) {
    for (const auto& [name, op] : cce_ops(scenario)) {
      CAPTURE(scenario);
      CAPTURE(name);
      const double x = std::min({static_cast<double>(op.n), static_cast<double>(op.k), static_cast<double>(op.m)});
      const double today = op.flops / gemm_table.at(x) + launch;
      CHECK(without.kernel_seconds(op) == doctest::Approx(today).epsilon(1e-12));
      if (op.phase == Phase::bwd) {
        CHECK(partial.kernel_seconds(op) == doctest::Approx(today).epsilon(1e-12));
      } else {
        CHECK(partial.kernel_seconds(op) != doctest::Approx(today));
      }
    }
  }
  // A CCE table changes the cost of cce_loss ops and of nothing else.
  const StepGraph g = build_step_graph(load_scenario(read_input("scenarios/calibration/qwen3-moe-slice-1gpu.json", "scenarios", "S")));
  const CostModel with(hardware_with(cce_calibration()));
  int64_t others = 0;
  for (const Op& op : g.programs.front().ops) {
    if (op.kind == OpKind::cce_loss || is_communication(op.kind)) continue;
    CHECK(with.kernel_seconds(op) == without.kernel_seconds(op));
    ++others;
  }
  CHECK(others > 100);
}

TEST_CASE("version 5 kernels/memory_by_kind: read per kind and pass, checked, and used before kernels/memory") {
  json j = sample_calibration();
  j["version"] = 5;
  const auto table = [](double x0, double y0, double x1, double y1) {
    return json{{"measure", "bytes"}, {"value", "bytes_per_s"}, {"points", {{x0, y0}, {x1, y1}}}};
  };
  j["kernels"]["memory_by_kind"] = {{"norm", {{"forward", table(1e6, 2e12, 1e9, 3e12)}, {"backward", table(1e6, 1e12, 1e9, 1.5e12)}}},
                                    {"activation", {{"backward", table(1e8, 0.8e12, 1e9, 0.8e12)}}}};
  const Calibration c = load_calibration(text(j));
  CHECK(c.memory_by_kind.size() == 3);
  const auto op_of = [](OpKind kind, Phase phase) {
    Op o;
    o.kind = kind;
    o.phase = phase;
    o.k = kind == OpKind::norm ? 2048 : 0;
    return o;
  };
  CHECK(c.memory_table(op_of(OpKind::norm, Phase::fwd)) == &c.memory_by_kind.at({OpKind::norm, 0, false}));
  CHECK(c.memory_table(op_of(OpKind::norm, Phase::recompute)) == &c.memory_by_kind.at({OpKind::norm, 0, false}));
  CHECK(c.memory_table(op_of(OpKind::norm, Phase::bwd)) == &c.memory_by_kind.at({OpKind::norm, 0, true}));
  CHECK(c.memory_table(op_of(OpKind::activation, Phase::fwd)) == nullptr);
  CHECK(c.memory_table(op_of(OpKind::gemm, Phase::fwd)) == nullptr);

  // t = bytes / table(bytes) + launch for a kind and pass with a table; kernels/memory for the rest.
  const HardwareSpec hw = hardware_with(j);
  const CostModel cost(hw);
  const double launch = hw.device.kernel_launch_overhead.value;
  Op op = norm_op(Phase::fwd, 2048);
  op.flops = 1e12;  // a norm's arithmetic: not a roofline term under a measured rate
  CHECK(cost.kernel_seconds(op) == doctest::Approx(1e9 / 3e12 + launch).epsilon(1e-12));
  op.phase = Phase::bwd;
  CHECK(cost.kernel_seconds(op) == doctest::Approx(1e9 / 1.5e12 + launch).epsilon(1e-12));
  CHECK(cost.kernel_seconds(op, 2.0) == doctest::Approx(2e9 / 1.5e12 + launch).epsilon(1e-12));  // clamped: time grows with bytes
  op.kind = OpKind::activation;
  CHECK(cost.kernel_seconds(op) == doctest::Approx(1e9 / 0.8e12 + launch).epsilon(1e-12));
  op.phase = Phase::fwd;  // no forward activation table: kernels/memory (4e12 at 1e9 bytes), under the roofline max
  op.flops = 0;
  CHECK(cost.kernel_seconds(op) == doctest::Approx(1e9 / 4e12 + launch).epsilon(1e-12));

  json bad = j;
  bad["kernels"]["memory_by_kind"]["gemm"] = bad["kernels"]["memory_by_kind"]["norm"];
  expect_error(bad, "/kernels/memory_by_kind/gemm", "unknown memory-bound op kind");
  bad = j;
  bad["kernels"]["memory_by_kind"]["norm"]["recompute"] = table(1, 1, 2, 2);
  expect_error(bad, "/kernels/memory_by_kind/norm/recompute", "unknown key");
  bad = j;
  bad["kernels"]["memory_by_kind"]["norm"]["forward"]["measure"] = "rows";
  expect_error(bad, "/kernels/memory_by_kind/norm/forward/measure", "bytes");
  bad = j;
  bad["version"] = 4;  // a key of version 5
  expect_error(bad, "/kernels/memory_by_kind", "unknown key");
  bad = j;
  bad["kernels"]["memory_by_kind"]["norm:128"] = bad["kernels"]["memory_by_kind"]["norm"];
  expect_error(bad, "/kernels/memory_by_kind/norm:128", "format version 6");  // a key of version 6
}

TEST_CASE("version 6 norm tables by row width: read first for norms of that width, the kind's for the others") {
  json j = sample_calibration();
  j["version"] = 6;
  const auto table = [](double y) {
    return json{{"measure", "bytes"}, {"value", "bytes_per_s"}, {"points", {{1e6, y}, {1e9, y}}}};
  };
  j["kernels"]["memory_by_kind"] = {{"norm", {{"forward", table(2e12)}}}, {"norm:128", {{"forward", table(0.5e12)}}}};
  const HardwareSpec hw = hardware_with(j);
  const CostModel cost(hw);
  const double launch = hw.device.kernel_launch_overhead.value;
  Op op = norm_op(Phase::fwd, 128);  // QK-norm: rows of one head
  CHECK(cost.kernel_seconds(op) == doctest::Approx(1e9 / 0.5e12 + launch).epsilon(1e-12));
  op.phase = Phase::recompute;
  CHECK(cost.kernel_seconds(op) == doctest::Approx(1e9 / 0.5e12 + launch).epsilon(1e-12));
  op.k = 2048;  // a layer norm: no table of its width, the kind's
  CHECK(cost.kernel_seconds(op) == doctest::Approx(1e9 / 2e12 + launch).epsilon(1e-12));

  for (const char* key : {"norm:", "norm:0", "norm:12a", "norm:-5", "norm:1234567890"}) {
    json bad = j;
    bad["kernels"]["memory_by_kind"][key] = table(1e12);
    expect_error(bad, std::string("/kernels/memory_by_kind/") + key, "row width");
  }
  json bad = j;
  bad["kernels"]["memory_by_kind"]["activation:128"] = j["kernels"]["memory_by_kind"]["norm"];
  expect_error(bad, "/kernels/memory_by_kind/activation:128", "only norm tables");
  bad = j;
  bad["kernels"]["memory_by_kind"]["norm:128"]["sideways"] = table(1e12);
  expect_error(bad, "/kernels/memory_by_kind/norm:128/sideways", "unknown key");
}

TEST_CASE("version 4 inter-node collective tables: read apart from the ones within a node, checked") {
  json j = sample_calibration();
  const json table = {{"measure", "bytes"}, {"value", "busbw_bytes_per_s"}, {"nodes", 2}, {"ranks_per_node", 4},
                      {"points", {{1048576, 1.1e10}, {1073741824, 4.2e10}}}};
  j["collectives_inter_node"] = {{"all_gather", {{"8", table}}}};
  expect_error(j, "/collectives_inter_node", "unknown key");  // a version 3 file has none
  j["version"] = 4;
  const Calibration c = load_calibration(text(j));
  REQUIRE(c.busbw_inter_node.contains({OpKind::all_gather, 8}));
  const auto& t = c.busbw_inter_node.at({OpKind::all_gather, 8});
  CHECK(t.nodes == 2);
  CHECK(t.ranks_per_node == 4);
  CHECK(t.busbw.at(1048576) == doctest::Approx(1.1e10));
  // Within a node the tables are unchanged: no 8-rank all-gather there.
  CHECK(c.collective(OpKind::all_gather, 8) == nullptr);
  REQUIRE(c.collective(OpKind::all_reduce, 2) != nullptr);

  j["collectives_inter_node"]["all_gather"]["8"]["ranks_per_node"] = 3;
  expect_error(j, "/collectives_inter_node/all_gather/8", "must be the group size 8");
  j["collectives_inter_node"]["all_gather"]["8"]["ranks_per_node"] = 4;
  j["collectives_inter_node"]["all_gather"]["8"].erase("nodes");
  expect_error(j, "/collectives_inter_node/all_gather/8", "missing \"nodes\"");
  j["collectives_inter_node"]["all_gather"]["8"]["nodes"] = 1;
  expect_error(j, "/collectives_inter_node/all_gather/8/nodes", "at least 2");
  j["collectives_inter_node"]["all_gather"]["8"]["nodes"] = "2";
  expect_error(j, "/collectives_inter_node/all_gather/8/nodes", "positive integer");
  j["collectives_inter_node"]["all_gather"]["8"]["nodes"] = 2;
  j["collectives_inter_node"]["broadcast"] = json::object();
  expect_error(j, "/collectives_inter_node/broadcast", "unknown collective");
  // Tables within a node take no such keys.
  j = sample_calibration();
  j["collectives"]["all_reduce"]["2"]["nodes"] = 2;
  expect_error(j, "/collectives/all_reduce/2/nodes", "unknown key");
}

TEST_CASE("the software stack's measured memory reaches the step graph unless the scenario sets it") {
  json cal = sample_calibration();
  cal["version"] = 3;
  cal["memory_overhead"] = {{"runtime_bytes", 5.5e8},
                            {"communicator_bytes", {{"all_gather", 6e8}, {"reduce_scatter", 5e8}, {"all_to_all", 7e8}}}};
  const HardwareSpec hw = hardware_with(cal);
  REQUIRE(hw.stack_memory);
  CHECK(hw.stack_memory->runtime_bytes == 5.5e8);
  CHECK(hw.stack_memory->communicator_bytes.all_gather == 6e8);
  CHECK(!hw.stack_memory->communicator_bytes.all_reduce);
  ScenarioSpec spec;
  CHECK(runtime_reserved_bytes(spec, hw) == 5.5e8);
  // An FSDP communicator (all-gather + reduce-scatter) holds the larger set of buffers; EP's
  // all-to-all its own; a kind not measured counts as the largest measured.
  CHECK(comm_buffer_bytes(spec, hw, {"all_gather", "reduce_scatter"}) == 6e8);
  CHECK(comm_buffer_bytes(spec, hw, {"all_to_all"}) == 7e8);
  CHECK(comm_buffer_bytes(spec, hw, {"all_reduce"}) == 7e8);
  spec.memory.runtime_reserved = Bytes{2e9};
  spec.memory.comm_buffer_per_group = Bytes{1e8};
  CHECK(runtime_reserved_bytes(spec, hw) == 2e9);
  CHECK(comm_buffer_bytes(spec, hw, {"all_to_all"}) == 1e8);
  // Without a measurement: the assumptions.
  const HardwareSpec plain = load_hardware(read_input("h200-hgx", "hardware", "HARDWARE"));
  CHECK(runtime_reserved_bytes(ScenarioSpec{}, plain) == kDefaultRuntimeReserved);
  CHECK(comm_buffer_bytes(ScenarioSpec{}, plain, {"all_gather"}) == kDefaultCommBufferPerGroup);

  // A one-GPU calibration measures the context only: communicators keep the default.
  json one = cal;
  one["memory_overhead"] = {{"runtime_bytes", 5.5e8}, {"communicator_bytes", json::object()}};
  const HardwareSpec hw1 = hardware_with(one);
  CHECK(runtime_reserved_bytes(ScenarioSpec{}, hw1) == 5.5e8);
  CHECK(comm_buffer_bytes(ScenarioSpec{}, hw1, {"all_gather"}) == kDefaultCommBufferPerGroup);

  auto expect_bad = [&](const json& overhead, const std::string& path) {
    json bad = cal;
    bad["memory_overhead"] = overhead;
    try {
      (void)hardware_with(bad);
      FAIL("no error for " << path);
    } catch (const InputError& e) {
      CHECK(e.file().ends_with("calibration/test.json"));
      CHECK(e.path() == path);
    }
  };
  expect_bad({{"runtime_bytes", -1}, {"communicator_bytes", json::object()}}, "/memory_overhead/runtime_bytes");
  expect_bad({{"runtime_bytes", 1e9}, {"communicator_bytes", json::object()}, {"comm_bytes", 1e8}},
             "/memory_overhead/comm_bytes");
  expect_bad({{"runtime_bytes", 1e9}}, "/memory_overhead/communicator_bytes");
  expect_bad({{"runtime_bytes", 1e9}, {"communicator_bytes", {{"broadcast", 1e8}}}}, "/memory_overhead/communicator_bytes/broadcast");
}

TEST_CASE("a bad calibration file is an input error naming that file") {
  json cal = sample_calibration();
  cal["version"] = 8;
  const HardwareSpec hw = hardware_with(cal);
  try {
    const CostModel cost(hw);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file().ends_with("calibration/test.json"));
    CHECK(e.path() == "/version");
  }
}

TEST_CASE("the shipped h200-x2 hardware file reads its calibration; a grid GEMM costs the measured time") {
  for (const std::string ref : {"h200-x2", "hardware/h200-x2.json"}) {  // embedded and on disk
    CAPTURE(ref);
    const HardwareSpec hw = load_hardware(read_input(ref, "hardware", "HARDWARE"));
    const CostModel cost(hw);
    REQUIRE(cost.calibration() != nullptr);
    REQUIRE(cost.calibration()->gemm_flops_per_s);
    REQUIRE(cost.calibration()->collective(OpKind::all_to_all, 2) != nullptr);
    // The file's own point at min(m, n, k) = 8192 (the 8192^3 GEMM), read here without the reader.
    const json file = json::parse(read_input("hardware/calibration/h200.json", "hardware", "CAL").text);
    double measured = 0;
    for (const auto& p : file["kernels"]["gemm"]["points"]) {
      if (p[0].get<double>() == 8192) measured = p[1].get<double>();
    }
    REQUIRE(measured > 0);
    const Op g = gemm(8192, 8192, 8192);
    CHECK(cost.kernel_seconds(g) == doctest::Approx(g.flops / measured + hw.device.kernel_launch_overhead.value));
    CHECK(measured > 0.6 * 989e12);  // sanity: a large BF16 GEMM on an H200 runs at most of its peak
    CHECK(measured < 989e12);
  }
}

TEST_CASE("version 7 kernels/gemm_shapes: each GEMM of a linear layer at its pass's table, by tokens") {
  json j = sample_calibration();
  j["version"] = 7;
  const auto table = [](double m0, double y0, double m1, double y1) {
    return json{{"measure", "tokens"}, {"value", "flops_per_s"}, {"points", {{m0, y0}, {m1, y1}}}};
  };
  j["kernels"]["gemm_shapes"] = {{"forward", {{"4096:2048", table(1024, 300e12, 8192, 600e12)}}},
                                 {"input_grad", {{"4096:2048", table(1024, 250e12, 8192, 500e12)}}},
                                 {"weight_grad", {{"4096:2048", table(1024, 200e12, 8192, 400e12)}}}};
  const Calibration c = load_calibration(text(j));
  REQUIRE(c.gemm_shapes.size() == 3);
  REQUIRE(c.gemm_shape_table(GemmPass::weight_grad, 4096, 2048) != nullptr);
  CHECK(c.gemm_shape_table(GemmPass::forward, 2048, 4096) == nullptr);  // (n, k), not (k, n)

  const HardwareSpec hw = hardware_with(j);
  const CostModel cost(hw);
  const double launch = hw.device.kernel_launch_overhead.value;
  const double rate = cost.power_state().rate_of(PowerClass::gemm);
  const double one = 2.0 * 8192 * 4096 * 2048;
  Op op = gemm(8192, 4096, 2048);
  CHECK(cost.kernel_seconds(op) == doctest::Approx(one / (600e12 * rate) + launch).epsilon(1e-12));
  op.phase = Phase::recompute;
  CHECK(cost.kernel_seconds(op) == doctest::Approx(one / (600e12 * rate) + launch).epsilon(1e-12));
  // The backward: the input gradient, and the weight gradient when the weight trains (two kernels).
  op.phase = Phase::bwd;
  op.flops = 2 * one;
  op.trainable_weight = true;
  op.num_kernels = 2;
  CHECK(cost.kernel_seconds(op) == doctest::Approx(one / (500e12 * rate) + one / (400e12 * rate) + 2 * launch).epsilon(1e-12));
  op.flops = one;  // a frozen weight (LoRA's base): the input gradient alone
  op.trainable_weight = false;
  op.num_kernels = 1;
  CHECK(cost.kernel_seconds(op) == doctest::Approx(one / (500e12 * rate) + launch).epsilon(1e-12));
  // Between grid tokens the table's log-linear interpolation: at 2048 tokens a third of the way up.
  Op mid = gemm(2048, 4096, 2048);
  const double mid_rate = 300e12 + (600e12 - 300e12) * std::log(2.0) / std::log(8.0);
  CHECK(cost.kernel_seconds(mid) == doctest::Approx(mid.flops / (mid_rate * rate) + launch).epsilon(1e-9));
  // Another shape keeps the min(m, n, k) table; so does an op that is not a plain linear layer.
  const Op other = gemm(8192, 2048, 4096);
  const CostModel without(hardware_with(sample_calibration()));
  CHECK(cost.kernel_seconds(other) == doctest::Approx(without.kernel_seconds(other)).epsilon(1e-12));
  Op fused = gemm(8192, 4096, 2048);
  fused.flops *= 3;  // three GEMMs' worth in one op
  CHECK(cost.kernel_seconds(fused) == doctest::Approx(without.kernel_seconds(fused)).epsilon(1e-12));

  json bad = j;
  bad["kernels"]["gemm_shapes"]["dgrad"] = bad["kernels"]["gemm_shapes"]["forward"];
  expect_error(bad, "/kernels/gemm_shapes/dgrad", "unknown pass");
  bad = j;
  bad["kernels"]["gemm_shapes"]["forward"]["4096x2048"] = table(1, 1, 2, 2);
  expect_error(bad, "/kernels/gemm_shapes/forward/4096x2048", "N:K");
  bad = j;
  bad["kernels"]["gemm_shapes"]["forward"]["4096:2048"]["measure"] = "min_mnk";
  expect_error(bad, "/kernels/gemm_shapes/forward/4096:2048/measure", "tokens");
  bad = j;
  bad["version"] = 6;  // a key of version 7
  expect_error(bad, "/kernels/gemm_shapes", "unknown key");
}
