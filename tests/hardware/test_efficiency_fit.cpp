// SPDX-License-Identifier: MIT
// The efficiency fit (src/cost/efficiency_fit.hpp) against closed forms, and the shipped hardware
// files against the fits of hardware/efficiency/kernel-points.json: every fitted curve and
// collective efficiency in a hardware file is what its cited kernel measurements give, to the
// rounding the file uses (max and ratios to 3 decimals, half_at to the unit).
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "cost/efficiency_fit.hpp"
#include "cost/kernel_points.hpp"
#include "hardware/hardware_spec.hpp"

using namespace moesim;

namespace {

constexpr double kPeak = 1e15;
constexpr double kLaunch = 4e-6;

// Points lying exactly on `curve` under the cost model's kernel time.
std::vector<KernelPoint> on_curve(const EfficiencyCurve& curve, const std::vector<double>& xs, double flops_scale) {
  std::vector<KernelPoint> out;
  for (double x : xs) {
    KernelPoint p{x, flops_scale * x * x * 64, 0};
    p.seconds = curve_seconds(curve, p, kPeak, kLaunch);
    out.push_back(p);
  }
  return out;
}

HardwareSpec hardware(const std::string& name) { return load_hardware(read_input(name, "hardware", "HARDWARE")); }

}  // namespace

TEST_CASE("the fit recovers a curve its points lie on, with zero residuals") {
  const EfficiencyCurve truth{0.7, 300};
  const auto points = on_curve(truth, {64, 128, 256, 512, 1024, 4096, 16384}, 1e3);
  const CurveFit fit = fit_efficiency_curve(points, kPeak, kLaunch, /*cap_at_best=*/false);
  CHECK(fit.curve.max == doctest::Approx(0.7).epsilon(1e-9));
  CHECK(fit.curve.half_at == doctest::Approx(300).epsilon(1e-9));
  CHECK_FALSE(fit.max_capped);
  CHECK(fit.rms_error < 1e-9);
  CHECK(fit.max_abs_error < 1e-9);
  // The cap is the best point: at x = 16384, 0.7 x 16384 / 16684. With it (the default), max is
  // that, and half_at refits under it.
  CHECK(fit.cap == doctest::Approx(0.7 * 16384 / 16684).epsilon(1e-9));
  const CurveFit capped = fit_efficiency_curve(points, kPeak, kLaunch);
  CHECK(capped.max_capped);
  CHECK(capped.curve.max == doctest::Approx(fit.cap).epsilon(1e-12));
  CHECK(capped.curve.half_at < 300);
}

TEST_CASE("the fit never gives a max above the best measured efficiency") {
  // Points far below saturation: the unconstrained asymptote (0.9) is above every point, so max is
  // the best point's efficiency and half_at is refitted under it.
  const EfficiencyCurve truth{0.9, 5000};
  const auto points = on_curve(truth, {256, 512, 1024, 2048}, 1e4);
  const CurveFit fit = fit_efficiency_curve(points, kPeak, kLaunch);
  CHECK(fit.max_capped);
  CHECK(fit.curve.max == doctest::Approx(0.9 * 2048 / 7048).epsilon(1e-9));
  CHECK(fit.curve.max <= fit.cap + 1e-12);
  CHECK(fit.curve.half_at >= 0);
  CHECK(fit.rms_error > 0);  // a capped curve cannot pass through points still rising
}

TEST_CASE("no size effect in the data gives a constant, and a lone point gives its own efficiency") {
  const auto flat = on_curve(EfficiencyCurve{0.5, 0}, {100, 1000, 10000}, 1e3);
  const CurveFit fit = fit_efficiency_curve(flat, kPeak, kLaunch);  // the cap (0.5) does not bind
  CHECK(fit.curve.max == doctest::Approx(0.5).epsilon(1e-9));
  CHECK(fit.curve.half_at == doctest::Approx(0).epsilon(1e-6));

  KernelPoint one{2048, 1e12, 0};
  one.seconds = 1e12 / (0.6 * kPeak) + kLaunch;
  const CurveFit lone = fit_efficiency_curve(std::vector<KernelPoint>{one}, kPeak, kLaunch);
  CHECK(lone.curve.max == doctest::Approx(0.6).epsilon(1e-9));
  CHECK(lone.curve.half_at == 0);

  // Nothing slower than the launch overhead: nothing to fit.
  CHECK_THROWS_AS(fit_efficiency_curve(std::vector<KernelPoint>{{1, 1, kLaunch / 2}}, kPeak, kLaunch),
                  std::invalid_argument);
}

TEST_CASE("published rows become the cost model's FLOPs and the publisher's times") {
  const KernelPointsFile file = load_kernel_points(read_input("hardware/efficiency/kernel-points.json", "hardware", "POINTS"));
  for (const CurveFitSpec& spec : file.fits) {
    if (spec.hardware != "h100-hgx") continue;
    const KernelPoint p = spec.sets.front().points.front();
    if (spec.curve == "gemm") {  // XLA sm_90: 1024 x 2048 x 256 at 139.519... TFLOP/s
      CHECK(p.x == 256);
      CHECK(p.flops == 2.0 * 1024 * 2048 * 256);
      CHECK(p.seconds == doctest::Approx(2.0 * 1024 * 2048 * 256 / 139519467775467.0).epsilon(1e-12));
    }
    if (spec.curve == "attention") {  // FA3 causal forward, seq 512 at 292 TFLOP/s, 16k tokens, 16 x 128
      const double published = 2.0 * 32 * 512 * 16 * 256 * 512 / 2;  // FlashAttention's causal count
      CHECK(p.x == 512);
      CHECK(p.seconds == doctest::Approx(published / 292e12).epsilon(1e-12));
      CHECK(p.flops == doctest::Approx(published * 513.0 / 512.0).epsilon(1e-12));  // (seq + 1) / 2 keys
    }
    if (spec.curve == "attention_backward") {  // counted as 2.5 forwards by the publisher, 2 here
      const double forward = 2.0 * 32 * 512 * 16 * 256 * 512;  // non-causal
      CHECK(p.seconds == doctest::Approx(2.5 * forward / 316e12).epsilon(1e-12));
      CHECK(p.flops == doctest::Approx(2 * forward).epsilon(1e-12));
    }
  }
}

TEST_CASE("an attention set of a fixed batch counts every sequence of it") {
  const KernelPointsFile file = load_kernel_points(read_input("hardware/efficiency/kernel-points.json", "hardware", "POINTS"));
  int seen = 0;
  for (const CurveFitSpec& spec : file.fits) {
    if (spec.hardware != "gb200-nvl72" || spec.curve.rfind("attention", 0) != 0) continue;
    // cudnn-frontend on a GB200: Llama 3.1's 64 heads of 128, batch 2, seq 2048, causal; 0.125 ms forward,
    // 0.382 ms backward; the backward counted as two forwards (the cost model's count).
    const KernelPoint p = spec.sets.front().points.front();
    const double forward = 2.0 * 2 * 2048 * 64 * 256 * (2049.0 / 2);
    CHECK(p.x == 2048);
    CHECK(p.flops == doctest::Approx(spec.curve == "attention" ? forward : 2 * forward).epsilon(1e-12));
    CHECK(p.seconds == doctest::Approx(spec.curve == "attention" ? 0.125e-3 : 0.382e-3).epsilon(1e-12));
    ++seen;
  }
  CHECK(seen == 2);
  const std::string head = R"({"format": "moesim-kernel-points", "version": 1, "sources": {"s": {"title": "t", "url": "u", "locator": "l", "conditions": "c"}}, "fits": [{"hardware": "h100-hgx", "curve": "attention", "dtype": "bf16", "sets": [{"source": "s", "kind": "attention", "phase": "forward", "causal": true, "heads": 2, "head_dim": 64, )";
  const std::string tail = R"("columns": ["seq", "seconds"], "rows": [[1024, 0.001]]}]}]})";
  const auto load = [](const std::string& text) { return load_kernel_points(InputText{"points.json", text, false}); };
  CHECK(load(head + R"("batch": 3, )" + tail).fits[0].points()[0].flops == doctest::Approx(2.0 * 3 * 1024 * 2 * 128 * 1025 / 2));
  try {
    load(head + R"("batch": 3, "tokens": 4096, )" + tail);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.path() == "/fits/0/sets/0/batch");
  }
}

TEST_CASE("every fitted curve in the hardware files is the fit of its cited kernel measurements") {
  const KernelPointsFile file = load_kernel_points(read_input("hardware/efficiency/kernel-points.json", "hardware", "POINTS"));
  REQUIRE(file.fits.size() >= 9);
  for (const CurveFitSpec& spec : file.fits) {
    CAPTURE(spec.hardware);
    CAPTURE(spec.curve);
    const HardwareSpec hw = hardware(spec.hardware);
    const CurveFit fit = fit_efficiency_curve(spec.points(), hw.device.peak_flops.of(spec.dtype).value().value,
                                              hw.device.kernel_launch_overhead.value);
    const auto shipped = curve_named(hw.efficiency, spec.curve);
    REQUIRE(shipped.has_value());
    CHECK(std::abs(shipped->max - fit.curve.max) <= 0.0005 + 1e-12);
    CHECK(std::abs(shipped->half_at - fit.curve.half_at) <= 0.5 + 1e-9);
    // The residuals the docs quote (recorded to 4 decimals).
    REQUIRE(spec.recorded.has_value());
    CHECK(std::abs(spec.recorded->rms_error - fit.rms_error) <= 0.00005 + 1e-12);
    CHECK(std::abs(spec.recorded->max_abs_error - fit.max_abs_error) <= 0.00005 + 1e-12);
    for (const KernelPointSet& s : spec.sets) CHECK(file.sources.contains(s.source));
  }
}

TEST_CASE("every sourced collective or memory efficiency in the hardware files is its measured ratio") {
  const KernelPointsFile file = load_kernel_points(read_input("hardware/efficiency/kernel-points.json", "hardware", "POINTS"));
  REQUIRE(file.constants.size() >= 7);
  for (const EfficiencyConstant& c : file.constants) {
    CAPTURE(c.hardware);
    CAPTURE(c.field);
    const HardwareSpec hw = hardware(c.hardware);
    CHECK(std::abs(constant_named(hw.efficiency, c.field) - c.efficiency()) <= 0.0005 + 1e-12);
    if (c.field == "collective_scale_out") CHECK(hw.efficiency.collective_scale_out.has_value());
  }
}

TEST_CASE("a malformed points file is an input error naming the file and JSON path") {
  auto load = [](const std::string& text) { return load_kernel_points(InputText{"points.json", text, false}); };
  const std::string head = R"({"format": "moesim-kernel-points", "version": 1, "sources": {"s": {"title": "t", "url": "u", "locator": "l", "conditions": "c"}}, )";
  const std::string fit = R"("fits": [{"hardware": "h100-hgx", "curve": "gemm", "dtype": "bf16", "sets": [{"source": "s", "kind": "gemm", "columns": ["m", "n", "k", "flops_per_s"], "rows": )";
  CHECK_NOTHROW(load(head + fit + "[[1, 2, 3, 4]]}]}]}"));
  try {
    load(head + fit + "[[1, 2, 3, -4]]}]}]}");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == "points.json");
    CHECK(e.path() == "/fits/0/sets/0/rows/0/3");
  }
  CHECK_THROWS_AS(load(head + fit + "[[1, 2, 3]]}]}]}"), InputError);                        // a short row
  CHECK_THROWS_AS(load(head + R"("fits": [{"hardware": "h", "curve": "gemm", "dtype": "bf16", "sets": [], "x": 1}]})"), InputError);  // unknown key
  CHECK_THROWS_AS(load(head + R"("fits": [{"hardware": "h", "curve": "softmax", "dtype": "bf16", "sets": []}]})"), InputError);
  CHECK_THROWS_AS(load(head + R"("fits": [], "constants": [{"hardware": "h", "field": "collective", "value": "500 GB/s", "of": "450 GB/s", "source": "s"}]})"), InputError);
  CHECK_THROWS_AS(load(head + R"("fits": [], "constants": [{"hardware": "h", "field": "collective", "value": "5 GB/s", "of": "45 GB/s", "source": "nobody"}]})"), InputError);
  // A memory kind the hardware files have no field for.
  CHECK_THROWS_AS(load(head + R"("fits": [], "constants": [{"hardware": "h", "field": "memory_by_kind.softmax", "value": "5 GB/s", "of": "45 GB/s", "source": "s"}]})"), InputError);
  CHECK_NOTHROW(load(head + R"("fits": [], "constants": [{"hardware": "h", "field": "memory_by_kind.norm", "value": "5 GB/s", "of": "45 GB/s", "source": "s"}]})"));
}
