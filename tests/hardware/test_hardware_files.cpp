// SPDX-License-Identifier: MIT
#include <doctest/doctest.h>

#include <filesystem>

#include "core/embedded.hpp"
#include "hardware/hardware_spec.hpp"

using namespace moesim;

namespace {
HardwareSpec load(const std::string& name) { return load_hardware(read_input(name, "hardware", "HARDWARE")); }
}  // namespace

TEST_CASE("every file in hardware/ loads, is embedded, says what a device is, and names itself") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator("hardware")) {
    if (!entry.is_regular_file()) continue;
    const std::string path = "hardware/" + entry.path().filename().string();
    CAPTURE(path);
    const HardwareSpec h = load_hardware(read_input(path, "hardware", "HARDWARE"));
    CHECK(h.name + ".json" == entry.path().filename().string());
    CHECK(find_embedded(path).has_value());
    CHECK_FALSE(h.device.description.empty());
    CHECK(h.doc.find("ssum") != std::string::npos);  // every file says which numbers are assumptions
    ++files;
  }
  CHECK(files == 10);
}

TEST_CASE("the 500 W HBM2e H100 is h100-hgx's die at its own memory and power limit") {
  const HardwareSpec sxm = load("h100-hgx");
  const HardwareSpec gt = load("h100-hbm2e-500w");
  CHECK(gt.device.hbm_bandwidth.value == doctest::Approx(2.4e12));
  CHECK(gt.device.hbm_capacity.value == doctest::Approx(96e9));
  // The SXM part's datasheet peaks; its 500 W limit slows compute-bound kernels by the clock-power
  // relation measured on the H200 (the same die's silicon), which h100-hgx carries at 700 W.
  CHECK(gt.device.peak_flops.bf16.value == sxm.device.peak_flops.bf16.value);
  CHECK(gt.device.peak_flops.of(Dtype::fp8)->value == sxm.device.peak_flops.of(Dtype::fp8)->value);
  REQUIRE(gt.device.power.has_value());
  REQUIRE(sxm.device.power.has_value());
  CHECK(gt.device.power->limit.value == 500);
  CHECK(gt.device.power->efficiency_limit.value == 700);
  CHECK(sxm.device.power->limit.value == 700);
  CHECK(sxm.device.power->compute_scale() == 1.0);
  CHECK(gt.device.power->static_power.value == sxm.device.power->static_power.value);
  CHECK(gt.device.power->clock_exponent == sxm.device.power->clock_exponent);
  // The source bounds the part's peak between the H100 NVL's 835 and the SXM's 989 TFLOP/s; the
  // sustained rate at 500 W lies inside that interval.
  const double sustained = gt.device.peak_flops.bf16.value * gt.device.power->compute_scale();
  CHECK(sustained > 835e12);
  CHECK(sustained < 989e12);
  // Same kernels as fractions of the peak: every efficiency curve and constant is h100-hgx's.
  const auto same = [](const EfficiencyCurve& a, const EfficiencyCurve& b) { return a.max == b.max && a.half_at == b.half_at; };
  const EfficiencySpec& a = gt.efficiency;
  const EfficiencySpec& b = sxm.efficiency;
  CHECK(same(a.gemm, b.gemm));
  CHECK(same(a.grouped_gemm, b.grouped_gemm));
  CHECK(same(a.attention, b.attention));
  CHECK(same(*a.attention_backward, *b.attention_backward));
  CHECK(same(a.linear_attention, b.linear_attention));
  for (AttentionKernel k : {AttentionKernel::flash2, AttentionKernel::flash3, AttentionKernel::cudnn}) {
    CAPTURE(enum_name(k));
    REQUIRE(a.attention_kernels->of(k) != nullptr);
    CHECK(same(a.attention_kernels->of(k)->forward, b.attention_kernels->of(k)->forward));
    CHECK(same(*a.attention_kernels->of(k)->backward, *b.attention_kernels->of(k)->backward));
  }
  CHECK(a.memory == b.memory);
  CHECK(a.collective == b.collective);
  CHECK(a.collective_scale_out == b.collective_scale_out);
  CHECK(a.overlap_slowdown == b.overlap_slowdown);
  CHECK(gt.fabric.scale_up.port_bandwidth.value == sxm.fabric.scale_up.port_bandwidth.value);
  CHECK(gt.fabric.scale_out->nic_bandwidth.value == doctest::Approx(50e9));  // 400 Gb/s per GPU
}

TEST_CASE("datasheet numbers arrive in SI units") {
  const HardwareSpec h200 = load("h200-hgx");
  CHECK(h200.device.peak_flops.bf16.value == doctest::Approx(989e12));
  CHECK(h200.device.peak_flops.of(Dtype::fp8)->value == doctest::Approx(1979e12));
  // Capacity as the device reports it (nvidia-smi: 143,771 MiB), not the datasheet's "141 GB".
  CHECK(h200.device.hbm_capacity.value == doctest::Approx(143771.0 * (1 << 20)).epsilon(1e-12));
  CHECK(load("h100-hgx").device.hbm_capacity.value == doctest::Approx(85'520'809'984.0).epsilon(1e-12));
  CHECK(h200.device.hbm_bandwidth.value == doctest::Approx(4.8e12));
  CHECK(h200.fabric.scale_up.port_bandwidth.value == doctest::Approx(450e9));    // 900 GB/s bidirectional
  CHECK(h200.fabric.scale_out->nic_bandwidth.value == doctest::Approx(50e9));    // 400 Gb/s
  CHECK(h200.devices_per_node == 8);
  CHECK_FALSE(h200.max_devices.has_value());  // any number of nodes

  const HardwareSpec sn = load("supernode-128");
  CHECK_FALSE(sn.max_devices.has_value());  // supernodes join through scale-out RDMA
  CHECK(sn.fabric.scale_up.domain_size == 128);
  CHECK_FALSE(sn.device.peak_flops.of(Dtype::fp8).has_value());  // no FP8 on the 910C class
  CHECK(sn.device.hbm_capacity.value == doctest::Approx(128e9));

  const HardwareSpec nvl = load("gb200-nvl72");
  CHECK(nvl.fabric.scale_up.domain_size == 72);
  CHECK(nvl.device.peak_flops.bf16.value == doctest::Approx(2.5e15));
  CHECK(load("cloudmatrix-384").fabric.scale_up.domain_size == 384);
  CHECK(load("a100-80g-hgx").device.peak_flops.bf16.value == doctest::Approx(312e12));
}

TEST_CASE("the Omni-Path A100 cluster is a100-80g-hgx but for its network: 4 x 100 Gb/s per node of 8") {
  const HardwareSpec hgx = load("a100-80g-hgx");
  const HardwareSpec opa = load("a100-80g-opa");
  CHECK(opa.device.peak_flops.bf16.value == hgx.device.peak_flops.bf16.value);
  CHECK(opa.device.hbm_bandwidth.value == hgx.device.hbm_bandwidth.value);
  CHECK(opa.device.hbm_capacity.value == hgx.device.hbm_capacity.value);
  const auto same = [](const EfficiencyCurve& a, const EfficiencyCurve& b) { return a.max == b.max && a.half_at == b.half_at; };
  CHECK(same(opa.efficiency.gemm, hgx.efficiency.gemm));
  CHECK(same(opa.efficiency.grouped_gemm, hgx.efficiency.grouped_gemm));
  CHECK(same(opa.efficiency.attention, hgx.efficiency.attention));
  REQUIRE((opa.efficiency.attention_kernels && opa.efficiency.attention_kernels->flash1));
  REQUIRE((hgx.efficiency.attention_kernels && hgx.efficiency.attention_kernels->flash1));
  const auto& fa1 = *hgx.efficiency.attention_kernels->flash1;
  const auto& opa_fa1 = *opa.efficiency.attention_kernels->flash1;
  CHECK(same(opa_fa1.forward, fa1.forward));
  CHECK(same(*opa_fa1.backward, *fa1.backward));
  CHECK(opa.efficiency.memory == hgx.efficiency.memory);
  CHECK(opa.efficiency.collective == hgx.efficiency.collective);
  CHECK(opa.efficiency.collective_scale_out == hgx.efficiency.collective_scale_out);
  CHECK(opa.fabric.scale_up.port_bandwidth.value == hgx.fabric.scale_up.port_bandwidth.value);
  CHECK(opa.devices_per_node == 8);
  CHECK(opa.fabric.scale_out->nic_bandwidth.value * 8 == doctest::Approx(4 * 100e9 / 8));  // bytes/s: 400 Gb/s a node
  for (const auto& tier : opa.fabric.scale_out->tiers) CHECK(tier.bandwidth_per_device.value == opa.fabric.scale_out->nic_bandwidth.value);
}
