// SPDX-License-Identifier: MIT
// The cost model against closed forms (roofline, one flow, ring and tree all-reduce, nccl-tests'
// bus bandwidth) and monotonicity (more bandwidth or FLOP/s is never slower).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost/cost_model.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;

namespace {

HardwareSpec h200() { return load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")); }

Op gemm(int64_t m, int64_t n, int64_t k) {
  Op op;
  op.kind = OpKind::gemm;
  op.dtype = Dtype::bf16;
  op.m = m;
  op.n = n;
  op.k = k;
  op.flops = 2.0 * static_cast<double>(m * n * k);
  op.bytes_read = 2.0 * static_cast<double>(m * k + k * n);
  op.bytes_written = 2.0 * static_cast<double>(m * n);
  return op;
}

// A compute-bound flash-attention op (no bytes) of `m` query rows.
Op attention_op(int64_t m, double flops, Phase phase = Phase::fwd) {
  Op op;
  op.kind = OpKind::flash_attention;
  op.m = m;
  op.flops = flops;
  op.phase = phase;
  return op;
}

}  // namespace

TEST_CASE("a large GEMM runs at the curve's efficiency of the peak, plus the launch overhead") {
  const HardwareSpec hw = h200();
  const CostModel cost(hw);
  const Op op = gemm(8192, 8192, 8192);
  const double eff = hw.efficiency.gemm.max * 8192 / (8192 + hw.efficiency.gemm.half_at);
  CHECK(cost.kernel_seconds(op) == doctest::Approx(op.flops / (989e12 * eff) + hw.device.kernel_launch_overhead.value));
  // Measured on an H200 back to back, at its 700 W limit: 649 TFLOP/s through torch.mm (cuBLAS's
  // default algorithm, bench/fp8_gemm_reference.py) and 742 through the best of 8 algorithms (the
  // calibration sweep); the fitted curve lies between them (docs/hardware-efficiency.md).
  const double tflops = op.flops / (cost.kernel_seconds(op) - hw.device.kernel_launch_overhead.value) / 1e12;
  CHECK(tflops > 649);
  CHECK(tflops < 742);
}

TEST_CASE("an FP8 GEMM runs at the gemm_fp8 curve's fraction of the FP8 peak; without the curve, at gemm's") {
  HardwareSpec hw = h200();
  REQUIRE(hw.efficiency.gemm_fp8.has_value());
  Op op = gemm(16384, 14336, 4096);
  op.dtype = Dtype::fp8;
  op.bytes_read /= 2;  // 1-byte inputs
  const double x = 4096;
  const double launch = hw.device.kernel_launch_overhead.value;
  const double fp8_peak = hw.device.peak_flops.fp8.value().value;
  const EfficiencyCurve& c = *hw.efficiency.gemm_fp8;
  CHECK(CostModel(hw).kernel_seconds(op) == doctest::Approx(op.flops / (fp8_peak * c.max * x / (x + c.half_at)) + launch));
  // Measured at this shape on an H200 at its power limit (bench/fp8_gemm_reference.py): 1,242.8
  // TFLOP/s in the forward (fast accumulation) and 1,256.6 for the weight gradient; the curve, fitted
  // to all 60 shapes, lies within 6% of both.
  const double tflops = op.flops / (CostModel(hw).kernel_seconds(op) - launch) / 1e12;
  CHECK(tflops > 1242.8 * 0.94);
  CHECK(tflops < 1256.6 * 1.06);
  // A BF16 GEMM keeps the gemm curve; an FP8 one falls back to it when the file has no FP8 curve.
  const Op bf16 = gemm(16384, 14336, 4096);
  const double e = hw.efficiency.gemm.max * x / (x + hw.efficiency.gemm.half_at);
  CHECK(CostModel(hw).kernel_seconds(bf16) == doctest::Approx(bf16.flops / (989e12 * e) + launch));
  hw.efficiency.gemm_fp8.reset();
  CHECK(CostModel(hw).kernel_seconds(op) == doctest::Approx(op.flops / (fp8_peak * e) + launch));
}

TEST_CASE("below the measured power limit, compute-bound kernels slow by the clock ratio; memory-bound ones do not") {
  HardwareSpec hw = h200();
  const CostModel at_measured(hw);
  // 500 W of a part measured at 700 W, 100 W static, SM power as clock^2.5: the SMs get 400 of
  // 600 W, so the clock is (400 / 600)^(1 / 2.5) = 0.8503 of the measured one.
  hw.device.power = PowerSpec{Watts{500}, Watts{700}, Watts{100}, 2.5, std::nullopt, std::nullopt};
  const double scale = std::pow(400.0 / 600.0, 1 / 2.5);
  CHECK(hw.device.power->compute_scale() == doctest::Approx(scale));
  CHECK(scale == doctest::Approx(0.8503).epsilon(1e-4));
  const CostModel capped(hw);
  const double launch = hw.device.kernel_launch_overhead.value;
  const Op big = gemm(8192, 8192, 8192);
  CHECK(capped.kernel_seconds(big) - launch == doctest::Approx((at_measured.kernel_seconds(big) - launch) / scale));
  const Op att = attention_op(8192, 1e12, Phase::bwd);
  CHECK(capped.kernel_seconds(att) - launch == doctest::Approx((at_measured.kernel_seconds(att) - launch) / scale));
  Op norm;
  norm.kind = OpKind::norm;
  norm.flops = 1e9;
  norm.bytes_read = 4e9;
  norm.bytes_written = 4e9;
  CHECK(capped.kernel_seconds(norm) == doctest::Approx(at_measured.kernel_seconds(norm)));
  // At the measured limit the scale is exactly 1.
  hw.device.power->limit = Watts{700};
  CHECK(CostModel(hw).kernel_seconds(big) == doctest::Approx(at_measured.kernel_seconds(big)));
}

TEST_CASE("a memory-bound op takes its bytes over the HBM bandwidth its kind reaches") {
  HardwareSpec hw = h200();
  REQUIRE(hw.efficiency.memory_by_kind.has_value());
  const MemoryKindsSpec kinds = *hw.efficiency.memory_by_kind;
  const double launch = hw.device.kernel_launch_overhead.value;
  auto seconds = [](const HardwareSpec& h, OpKind kind) {
    Op op;
    op.kind = kind;
    op.flops = 1e9;
    op.bytes_read = 4e9;
    op.bytes_written = 4e9;
    return CostModel(h).kernel_seconds(op);
  };
  for (const auto& [kind, fraction] : {std::pair{OpKind::norm, kinds.norm}, std::pair{OpKind::activation, kinds.activation},
                                       std::pair{OpKind::elementwise, kinds.elementwise},
                                       std::pair{OpKind::optimizer, kinds.optimizer}, std::pair{OpKind::dp_copy, kinds.dp_copy}}) {
    CAPTURE(static_cast<int>(kind));
    REQUIRE(fraction.has_value());
    CHECK(seconds(hw, kind) == doctest::Approx(8e9 / (4.8e12 * *fraction) + launch));
  }
  // A kind the file does not name, and every kind without memory_by_kind: the memory fraction.
  CHECK(seconds(hw, OpKind::cross_entropy) == doctest::Approx(8e9 / (4.8e12 * hw.efficiency.memory) + launch));
  hw.efficiency.memory_by_kind.reset();
  CHECK(seconds(hw, OpKind::norm) == doctest::Approx(8e9 / (4.8e12 * hw.efficiency.memory) + launch));
}

TEST_CASE("skinny GEMMs and few tokens per expert run below the large-GEMM efficiency") {
  const CostModel cost(h200());
  auto tflops = [&](const Op& op) { return op.flops / cost.kernel_seconds(op); };
  CHECK(tflops(gemm(16, 8192, 8192)) < 0.5 * tflops(gemm(8192, 8192, 8192)));
  Op few = gemm(14 * 32, 6144, 3584);
  few.kind = OpKind::grouped_gemm;
  few.num_groups = 14;
  Op many = gemm(14 * 4096, 6144, 3584);
  many.kind = OpKind::grouped_gemm;
  many.num_groups = 14;
  CHECK(tflops(few) < tflops(many));
  // Sampled routing: twice the rows, about twice the time for a large grouped GEMM.
  CHECK(cost.kernel_seconds(many, 2.0) == doctest::Approx(2 * cost.kernel_seconds(many)).epsilon(0.02));
}

TEST_CASE("one point-to-point flow takes latency + bytes / bandwidth") {
  const HardwareSpec hw = h200();
  const CostModel cost(hw);
  const CollectiveCost c = cost.collective(OpKind::send, 1e9, GroupPlacement{2, 1, 2});
  const double b = 450e9 * hw.efficiency.collective;
  CHECK(c.seconds() == doctest::Approx(hw.fabric.scale_up.latency.value + 1e9 / b));
  const CollectiveCost far = cost.collective(OpKind::send, 1e9, GroupPlacement{2, 2, 1});
  const double b_nic = 50e9 * hw.efficiency.collective_scale_out.value_or(hw.efficiency.collective);
  CHECK(far.seconds() == doctest::Approx(5e-6 + 1e9 / b_nic));
}

TEST_CASE("ring all-reduce: 2(n-1)/n S/B + 2(n-1) latencies; tree for small messages") {
  const HardwareSpec hw = h200();
  const CostModel cost(hw);
  const double b = 450e9 * hw.efficiency.collective, a = hw.fabric.scale_up.latency.value;
  const CollectiveCost big = cost.collective(OpKind::all_reduce, 1e9, GroupPlacement{8, 1, 8});
  CHECK(big.algorithm == CollectiveAlgorithm::ring);
  CHECK(big.seconds() == doctest::Approx(2.0 * 7 / 8 * 1e9 / b + 2 * 7 * a));
  const CollectiveCost small = cost.collective(OpKind::all_reduce, 1e3, GroupPlacement{8, 1, 8});
  CHECK(small.algorithm == CollectiveAlgorithm::tree);
  CHECK(small.seconds() < 2 * 7 * a);
  // nccl-tests: busbw = algbw x 2(n-1)/n reaches the bandwidth for large messages.
  const double algbw = 1e9 / big.seconds();
  CHECK(algbw * CostModel::bus_factor(OpKind::all_reduce, 8) == doctest::Approx(b).epsilon(0.01));
}

TEST_CASE("all-gather and all-to-all move (n-1)/n of the size; across domains the NIC carries a share") {
  const HardwareSpec hw = h200();
  const CostModel cost(hw);
  const CollectiveCost ag = cost.collective(OpKind::all_gather, 8e9, GroupPlacement{8, 1, 8});
  CHECK(ag.up_bytes == doctest::Approx(7e9));
  CHECK(ag.out_bytes == 0);
  const CollectiveCost a2a = cost.collective(OpKind::all_to_all, 64e9, GroupPlacement{64, 8, 8});
  CHECK(a2a.algorithm == CollectiveAlgorithm::hierarchical);
  CHECK(a2a.up_bytes + a2a.out_bytes == doctest::Approx(63e9));
  CHECK(a2a.out_bytes == doctest::Approx(56e9));  // 56 of the 63 peers are in other nodes
  const CollectiveCost hag = cost.collective(OpKind::all_gather, 64e9, GroupPlacement{64, 8, 8});
  CHECK(hag.out_bytes == doctest::Approx(7.0 / 8 * 64e9 / 8));
  CHECK(CostModel::bus_factor(OpKind::all_gather, 8) == doctest::Approx(7.0 / 8));
  CHECK(CostModel::bus_factor(OpKind::all_to_all, 64) == doctest::Approx(63.0 / 64));
}

TEST_CASE("scale-out collectives reach the NIC bandwidth x collective_scale_out; scale-up keeps collective") {
  HardwareSpec hw = h200();
  REQUIRE(hw.efficiency.collective_scale_out.has_value());
  const GroupPlacement two_nodes{16, 2, 8};
  const CollectiveCost with = CostModel(hw).collective(OpKind::all_gather, 1e9, two_nodes);
  CHECK(with.up_bandwidth == doctest::Approx(450e9 * hw.efficiency.collective));
  CHECK(with.out_bandwidth == doctest::Approx(50e9 * *hw.efficiency.collective_scale_out));
  hw.efficiency.collective_scale_out.reset();  // absent: the one collective efficiency for both
  const CollectiveCost without = CostModel(hw).collective(OpKind::all_gather, 1e9, two_nodes);
  CHECK(without.out_bandwidth == doctest::Approx(50e9 * hw.efficiency.collective));
  CHECK(without.up_bandwidth == doctest::Approx(with.up_bandwidth));
}

TEST_CASE("the backward of an attention kernel runs on attention_backward when the file has one") {
  HardwareSpec hw = h200();
  REQUIRE(hw.efficiency.attention_backward.has_value());
  const Op fwd = attention_op(8192, 1e13);
  const Op bwd = attention_op(8192, 2e13, Phase::bwd);
  const double launch = hw.device.kernel_launch_overhead.value;
  const CostModel cost(hw);
  CHECK(cost.kernel_seconds(fwd) == doctest::Approx(1e13 / (989e12 * hw.efficiency.attention.at(8192)) + launch));
  CHECK(cost.kernel_seconds(bwd) ==
        doctest::Approx(2e13 / (989e12 * hw.efficiency.attention_backward->at(8192)) + launch));
  // Measured on an H200 (torch SDPA, docs/modelling.md#measured-on-h200): the backward reaches about
  // 0.37 of the peak where the forward reaches 0.6; the curves say so.
  CHECK(hw.efficiency.attention_backward->at(8192) < 0.7 * hw.efficiency.attention.at(8192));
  hw.efficiency.attention_backward.reset();  // absent: the forward's curve for both phases
  CHECK(CostModel(hw).kernel_seconds(bwd) == doctest::Approx(2 * (cost.kernel_seconds(fwd) - launch) + launch));
}

TEST_CASE("more bandwidth or more FLOP/s is never slower") {
  HardwareSpec fast = h200();
  const HardwareSpec base = h200();
  fast.device.peak_flops.bf16.value *= 2;
  fast.device.hbm_bandwidth.value *= 2;
  fast.fabric.scale_up.port_bandwidth.value *= 2;
  fast.fabric.scale_out->nic_bandwidth.value *= 2;
  const CostModel a(base), b(fast);
  for (const Op& op : {gemm(16, 4096, 4096), gemm(4096, 4096, 4096), gemm(1, 1, 1)}) {
    CHECK(b.kernel_seconds(op) <= a.kernel_seconds(op));
  }
  for (OpKind kind : {OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_reduce, OpKind::all_to_all}) {
    for (double bytes : {1e3, 1e6, 1e9}) {
      for (const GroupPlacement& g : {GroupPlacement{8, 1, 8}, GroupPlacement{64, 8, 8}}) {
        CHECK(b.collective(kind, bytes, g).seconds() <= a.collective(kind, bytes, g).seconds());
      }
    }
  }
}

TEST_CASE("hierarchical dispatch: a token crosses the network once per remote domain holding one of its experts") {
  const HardwareSpec hw = h200();
  const CostModel cost(hw);
  // Closed form: 4 experts on 2 ranks in 2 domains, top-4: every token reaches the other domain
  // once - 1 remote copy of its 4, where direct dispatch sends the 2 copies for the remote rank.
  const GroupPlacement two{2, 2, 1};
  CHECK(CostModel::hierarchical_out_fraction(4, 4, two) == doctest::Approx(0.25));
  CHECK(cost.collective(OpKind::all_to_all, 8e9, two).out_bytes == doctest::Approx(4e9));
  CHECK(cost.hierarchical_all_to_all(8e9, two, 0.25).out_bytes == doctest::Approx(2e9));
  // Inside one domain hierarchical is direct.
  const GroupPlacement node{8, 1, 8};
  CHECK(CostModel::hierarchical_out_fraction(256, 8, node) == 0);
  CHECK(cost.hierarchical_all_to_all(8e9, node, 0).up_bytes == cost.collective(OpKind::all_to_all, 8e9, node).up_bytes);

  // The expectation against sampling: DeepSeek-V3's 256 experts, top-8, EP 64 over 8 nodes.
  const GroupPlacement ep64{64, 8, 8};
  std::mt19937_64 rng(7);
  std::vector<int> experts(256);
  std::iota(experts.begin(), experts.end(), 0);
  const int tokens = 200000;
  double remote_domains = 0;
  for (int t = 0; t < tokens; ++t) {
    std::set<int> domains;
    for (int i = 0; i < 8; ++i) {  // a partial Fisher-Yates shuffle: 8 distinct experts
      std::uniform_int_distribution<int> pick(i, 255);
      std::swap(experts[static_cast<size_t>(i)], experts[static_cast<size_t>(pick(rng))]);
      const int domain = experts[static_cast<size_t>(i)] / 32;
      if (domain != 0) domains.insert(domain);  // the sender sits in domain 0
    }
    remote_domains += static_cast<double>(domains.size());
  }
  const double sampled = remote_domains / tokens / 8;
  CHECK(CostModel::hierarchical_out_fraction(256, 8, ep64) == doctest::Approx(sampled).epsilon(0.005));
  // Fewer bytes on the network than direct dispatch's 7/8 of the buffer, never more.
  const double direct = cost.collective(OpKind::all_to_all, 64e9, ep64).out_bytes;
  const double hier = cost.hierarchical_all_to_all(64e9, ep64, CostModel::hierarchical_out_fraction(256, 8, ep64)).out_bytes;
  CHECK(hier < 0.7 * direct);
}

TEST_CASE("limited routing: a token reaches only its units' domains (DeepSeek-V3: 4 of 8 groups)") {
  const GroupPlacement ep64{64, 8, 8};  // one routing group of 32 experts per domain
  const double limited = CostModel::hierarchical_out_fraction(256, 8, ep64, 8, 4);
  const double free = CostModel::hierarchical_out_fraction(256, 8, ep64);
  CHECK(limited < free);
  CHECK(limited * 8 <= 4.0);  // at most 4 domains, of which the sender's may be one
  // The even split (routing.hpp): 4 groups uniformly, 2 experts in each, so the token reaches
  // exactly its 4 groups' domains, 7/8 of which are remote on average: 3.5 of 8 copies.
  CHECK(limited == doctest::Approx(3.5 / 8).epsilon(1e-12));
  // Against sampling the same token model: the remote domains among 4 uniformly chosen of 8.
  std::mt19937_64 rng(11);
  std::vector<int> groups(8);
  const int tokens = 200000;
  double remote = 0;
  for (int t = 0; t < tokens; ++t) {
    std::iota(groups.begin(), groups.end(), 0);
    for (int i = 0; i < 4; ++i) {
      std::uniform_int_distribution<int> pick(i, 7);
      std::swap(groups[static_cast<size_t>(i)], groups[static_cast<size_t>(pick(rng))]);
      if (groups[static_cast<size_t>(i)] != 0) remote += 1;  // the sender sits in domain 0
    }
  }
  CHECK(limited == doctest::Approx(remote / tokens / 8).epsilon(0.005));
  // One node per token (M = 1): remote with probability 7/8, one copy of 8.
  CHECK(CostModel::hierarchical_out_fraction(256, 8, ep64, 8, 1) == doctest::Approx(7.0 / 64).epsilon(1e-12));
  // Device-limited over the 64 ranks, 3 per token: 3 ranks uniformly of 64, 8 ranks per domain.
  const double missed = (56.0 / 64) * (55.0 / 63) * (54.0 / 62);
  CHECK(CostModel::hierarchical_out_fraction(256, 8, ep64, 64, 3) == doctest::Approx(7 * (1 - missed) / 8).epsilon(1e-12));
  // More units than assignments: a top-2 token reaches 2 of its 4 groups.
  CHECK(CostModel::hierarchical_out_fraction(256, 2, ep64, 8, 4) ==
        doctest::Approx(7 * (1 - 7.0 / 8 * 6.0 / 7) / 2).epsilon(1e-12));  // r = 2 units of 8, one per domain
  // Groups that do not each sit in one domain bound nothing: the unlimited expectation.
  CHECK(CostModel::hierarchical_out_fraction(256, 8, GroupPlacement{64, 16, 4}, 8, 4) ==
        CostModel::hierarchical_out_fraction(256, 8, GroupPlacement{64, 16, 4}));
}

TEST_CASE("FlashAttention 1 on A100 runs at the FlashAttention-2 paper's 25-40% of the peak") {
  // MPT-7B on 8 x A100 at 8192 tokens (llm-foundry's Triton FlashAttention), and the same run with
  // the hardware file's default attention (FlashAttention-2-level).
  const std::string path = "tests/validation/scenarios/mosaic-mpt-7b-8xa100-s8192.json";
  const nlohmann::json base = nlohmann::json::parse(read_input(path, "scenarios", "SCENARIO").text);
  REQUIRE(base["fused_ops"]["attention_kernel"] == "flash1");
  nlohmann::json dflt_json = base;
  dflt_json["fused_ops"]["attention_kernel"] = "default";
  const Scenario fa1 = load_scenario(InputText{path, base.dump(), false});
  const Scenario dflt = load_scenario(InputText{path, dflt_json.dump(), false});
  const AttentionKernelCurves& curves = *fa1.hardware.efficiency.attention_kernels->flash1;
  // arXiv 2307.08691's abstract: FlashAttention reaches 25-40% of the A100's peak; the forward takes
  // the top of the range, the backward its bottom.
  CHECK(curves.forward.max == 0.40);
  CHECK(curves.backward->max == 0.25);
  const Op fwd = attention_op(8192, 1e13);
  const Op bwd = attention_op(8192, 1e13, Phase::bwd);
  const double peak = fa1.hardware.device.peak_flops.bf16.value;
  const double launch = fa1.hardware.device.kernel_launch_overhead.value;
  const CostModel cost1(fa1.hardware), cost_default(dflt.hardware);
  CHECK(cost1.kernel_seconds(fwd) == doctest::Approx(1e13 / (peak * curves.forward.at(8192)) + launch));
  CHECK(cost1.kernel_seconds(bwd) == doctest::Approx(1e13 / (peak * curves.backward->at(8192)) + launch));
  // Slower than the default by the ratio of the curves' tops (same half_at): 0.64 / 0.40 forward.
  const double ratio = (cost1.kernel_seconds(fwd) - launch) / (cost_default.kernel_seconds(fwd) - launch);
  CHECK(ratio == doctest::Approx(dflt.hardware.efficiency.attention.max / 0.40).epsilon(1e-9));
}

TEST_CASE("a scenario's attention kernel puts that kernel's curves in place of the hardware's default") {
  // The torchtitan Llama 3.1 8B case on the 500 W H100, with its attention kernel set three ways.
  const std::string path = "tests/validation/scenarios/torchtitan-llama31-8b-8xh100-fsdp.json";
  const nlohmann::json base = nlohmann::json::parse(read_input(path, "scenarios", "SCENARIO").text);
  auto with_kernel = [&](const std::string& kernel) {
    nlohmann::json j = base;
    j["fused_ops"]["attention_kernel"] = kernel;
    return load_scenario(InputText{path, j.dump(), false});
  };
  const Scenario fa2 = with_kernel("flash2");
  const Scenario fa3 = with_kernel("flash3");
  const Scenario dflt = with_kernel("default");
  const AttentionKernelCurves& curves = *dflt.hardware.efficiency.attention_kernels->flash2;
  CHECK(fa2.hardware.efficiency.attention.max == curves.forward.max);
  CHECK(fa2.hardware.efficiency.attention.half_at == curves.forward.half_at);
  CHECK(fa2.hardware.efficiency.attention_backward->max == curves.backward->max);
  // The default of h100-hgx's die is FlashAttention-3's curve.
  CHECK(fa3.hardware.efficiency.attention.max == dflt.hardware.efficiency.attention.max);

  const Op fwd = attention_op(8192, 1e13);
  const Op bwd = attention_op(8192, 1e13, Phase::bwd);
  const double launch = fa2.hardware.device.kernel_launch_overhead.value;
  // The 500 W part runs compute-bound kernels at its power limit's share of the curves' rate.
  const double peak = fa2.hardware.device.peak_flops.bf16.value * fa2.hardware.device.power->compute_scale();
  const CostModel cost2(fa2.hardware), cost3(fa3.hardware);
  CHECK(cost2.kernel_seconds(fwd) == doctest::Approx(1e13 / (peak * curves.forward.at(8192)) + launch));
  CHECK(cost2.kernel_seconds(bwd) == doctest::Approx(1e13 / (peak * curves.backward->at(8192)) + launch));
  // FlashAttention-2 on H100 runs at about 55% of FlashAttention-3's rate at 8k (333 against 602
  // TFLOP/s forward, FlashAttention-3 paper, Figure 5): the curves carry that ratio.
  const double ratio = (cost3.kernel_seconds(fwd) - launch) / (cost2.kernel_seconds(fwd) - launch);
  CHECK(ratio == doctest::Approx(333.0 / 602.0).epsilon(0.01));
  // A GEMM does not change with the attention kernel.
  Op g;
  g.kind = OpKind::gemm;
  g.m = g.n = g.k = 4096;
  g.flops = 2.0 * 4096 * 4096 * 4096;
  CHECK(cost2.kernel_seconds(g) == cost3.kernel_seconds(g));
}
