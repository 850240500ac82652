// SPDX-License-Identifier: MIT
// fit_efficiency: fits every curve of hardware/efficiency/kernel-points.json and prints the fit,
// its residuals and what the hardware file ships, as markdown tables (docs/hardware-efficiency.md
// shows them); with --points, every point with its measured and fitted efficiency as well.
// Run from the project root: build/tools/fit_efficiency [--points] [POINTS_FILE]
// Exit codes: 0 ok, 2 bad input (file and JSON path named), 1 internal error.
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "cost/efficiency_fit.hpp"
#include "cost/kernel_points.hpp"
#include "hardware/hardware_spec.hpp"

using namespace moesim;

namespace {

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void print_fits(const KernelPointsFile& file) {
  std::printf("| hardware | curve | points | sources | fit max | fit half_at | max capped | rms error | largest error | shipped max | shipped half_at |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const CurveFitSpec& spec : file.fits) {
    const HardwareSpec hw = load_hardware(read_input(spec.hardware, "hardware", "HARDWARE"));
    const double peak = hw.device.peak_flops.of(spec.dtype).value().value;
    const std::vector<KernelPoint> points = spec.points();
    const CurveFit fit = fit_efficiency_curve(points, peak, hw.device.kernel_launch_overhead.value);
    std::string sources;
    for (const KernelPointSet& s : spec.sets) sources += (sources.empty() ? "" : ", ") + s.source;
    const auto shipped = curve_named(hw.efficiency, spec.curve);
    std::printf("| %s | %s | %zu | %s | %.4f | %.1f | %s | %.2f%% | %.2f%% | %s | %s |\n", spec.hardware.c_str(),
                spec.curve.c_str(), points.size(), sources.c_str(), fit.curve.max, fit.curve.half_at,
                fit.max_capped ? "yes" : "no", 100 * fit.rms_error, 100 * fit.max_abs_error,
                shipped ? format_number(shipped->max).c_str() : "absent",
                shipped ? format_number(shipped->half_at).c_str() : "absent");
  }
}

void print_residuals(const KernelPointsFile& file) {
  std::printf("\n| hardware | curve | source | points | rms error | mean error (bias) | largest error |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const CurveFitSpec& spec : file.fits) {
    const HardwareSpec hw = load_hardware(read_input(spec.hardware, "hardware", "HARDWARE"));
    const double peak = hw.device.peak_flops.of(spec.dtype).value().value;
    const CurveFit fit = fit_efficiency_curve(spec.points(), peak, hw.device.kernel_launch_overhead.value);
    size_t first = 0;
    for (const KernelPointSet& s : spec.sets) {
      double sum_sq = 0, sum = 0, largest = 0;
      for (size_t i = first; i < first + s.points.size(); ++i) {
        const double r = fit.residuals[i];
        sum_sq += r * r;
        sum += r;
        largest = std::max(largest, std::abs(r));
      }
      const auto n = static_cast<double>(s.points.size());
      std::printf("| %s | %s | %s | %zu | %.1f%% | %+.1f%% | %.1f%% |\n", spec.hardware.c_str(), spec.curve.c_str(),
                  s.source.c_str(), s.points.size(), 100 * std::sqrt(sum_sq / n), 100 * sum / n, 100 * largest);
      first += s.points.size();
    }
  }
}

// Every point: x, the cost model's FLOPs, the time, the efficiency it measured (F / ((t - L) P))
// and the fitted curve's, and the relative time error of the fit.
void print_points(const KernelPointsFile& file) {
  for (const CurveFitSpec& spec : file.fits) {
    const HardwareSpec hw = load_hardware(read_input(spec.hardware, "hardware", "HARDWARE"));
    const double peak = hw.device.peak_flops.of(spec.dtype).value().value;
    const double launch = hw.device.kernel_launch_overhead.value;
    const std::vector<KernelPoint> points = spec.points();
    const CurveFit fit = fit_efficiency_curve(points, peak, launch);
    std::printf("\n%s %s (max %.3f, half_at %.0f)\n\n| source | x | GFLOP | time us | measured | fitted | error |\n"
                "|---|---|---|---|---|---|---|\n",
                spec.hardware.c_str(), spec.curve.c_str(), fit.curve.max, fit.curve.half_at);
    size_t i = 0;
    for (const KernelPointSet& s : spec.sets) {
      for (const KernelPoint& p : s.points) {
        std::printf("| %s | %.0f | %.3f | %.2f | %.3f | %.3f | %+.1f%% |\n", s.source.c_str(), p.x, p.flops / 1e9,
                    p.seconds * 1e6, p.flops / ((p.seconds - launch) * peak), fit.curve.at(p.x), 100 * fit.residuals[i]);
        ++i;
      }
    }
  }
}

void print_constants(const KernelPointsFile& file) {
  std::printf("\n| hardware | field | published | of | ratio | shipped | source |\n|---|---|---|---|---|---|---|\n");
  for (const EfficiencyConstant& c : file.constants) {
    const HardwareSpec hw = load_hardware(read_input(c.hardware, "hardware", "HARDWARE"));
    std::printf("| %s | %s | %.1f GB/s | %.1f GB/s | %.4f | %.3f | %s |\n", c.hardware.c_str(), c.field.c_str(),
                c.value_bytes_per_s / 1e9, c.link_bytes_per_s / 1e9, c.efficiency(),
                constant_named(hw.efficiency, c.field), c.source.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool points = false;
  std::string path = "hardware/efficiency/kernel-points.json";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--points") {
      points = true;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "fit_efficiency: unknown flag %s (usage: fit_efficiency [--points] [POINTS_FILE])\n", arg.c_str());
      return 2;
    } else {
      path = arg;
    }
  }
  try {
    const KernelPointsFile file = load_kernel_points(read_input(path, "hardware", "POINTS_FILE"));
    print_fits(file);
    print_residuals(file);
    print_constants(file);
    if (points) print_points(file);
    return 0;
  } catch (const InputError& e) {
    std::fprintf(stderr, "fit_efficiency: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit_efficiency: internal error: %s\n", e.what());
    return 1;
  }
}
