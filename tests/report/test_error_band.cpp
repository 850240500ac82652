// SPDX-License-Identifier: MIT
// The error band read from validation records (report/error_band.hpp), and the ties it gives.
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "report/error_band.hpp"

using namespace moesim;

namespace {

// Two runs of model "a" (-3% and -1%: spread 2%), one of "b" at +5%.
constexpr const char* kRecords = R"({
  "format": "moesim-error-bands", "version": 1, "doc": "test",
  "hardware": [
    {"names": ["box"], "basis": "executor runs", "source": "here",
     "runs": [
       {"run": "a1", "model": "a", "step": -0.03, "families": {"gemm": 0.10, "attention": -0.04}},
       {"run": "a2", "model": "a", "step": -0.01, "families": {"gemm": 0.12}},
       {"run": "b1", "model": "b", "step": 0.05}
     ]}
  ]
})";

}  // namespace

TEST_CASE("the band is the range of the records' errors; ties use the largest spread within one model") {
  const ErrorBand band = error_band_from(kRecords, "records.json", "box");
  REQUIRE(band.validated);
  CHECK(band.step.low == doctest::Approx(-0.03));
  CHECK(band.step.high == doctest::Approx(0.05));
  CHECK(band.step.num_runs == 3);
  CHECK(band.tie_fraction == doctest::Approx(0.02));  // model a: -1% - (-3%); b has one run
  REQUIRE(band.families.size() == 2);
  CHECK(band.families[0].first == "attention");
  CHECK(band.families[1].first == "gemm");
  CHECK(band.families[1].second.low == doctest::Approx(0.10));
  CHECK(band.families[1].second.high == doctest::Approx(0.12));
}

TEST_CASE("a plan within the band of the best is a tie, one outside is not") {
  const ErrorBand band = error_band_from(kRecords, "records.json", "box");
  CHECK(within_band(band, 10.0, 10.19));   // 1.9% slower
  CHECK(within_band(band, 10.0, 10.2));    // 2% exactly: the edge is a tie
  CHECK_FALSE(within_band(band, 10.0, 10.21));
  CHECK(within_band(band, 10.0, 10.0));
}

TEST_CASE("hardware without a record is unvalidated: no band, no ties") {
  const ErrorBand band = error_band_from(kRecords, "records.json", "my-box");
  CHECK_FALSE(band.validated);
  CHECK_FALSE(within_band(band, 10.0, 10.0));
  CHECK(error_band_line(band).starts_with("unvalidated"));
}

TEST_CASE("the embedded records: the calibrated 2 x H200 is validated, the K3 supernode is not") {
  const ErrorBand h200 = error_band_for("h200-x2");
  REQUIRE(h200.validated);
  // The largest spread of one model's errors (docs/calibration/validation.md): the K3 slices, from
  // -5.3% (DSA unfused) to -0.4% (2 GPUs, PP2).
  CHECK(h200.tie_fraction == doctest::Approx(0.049));
  CHECK(h200.step.low == doctest::Approx(-0.053));  // the K3 slice with DSA unfused
  CHECK(h200.step.high == doctest::Approx(0.057));  // the Llama slice
  CHECK_FALSE(error_band_for("supernode-128").validated);
}

TEST_CASE("malformed records are input errors naming the file") {
  CHECK_THROWS_WITH_AS(error_band_from(R"({"format": "other", "hardware": []})", "r.json", "box"),
                       doctest::Contains("r.json"), InputError);
}
