// SPDX-License-Identifier: MIT
// Capacity planning: the answers satisfy what they claim (the largest fit fits and one step more
// does not; the device answer meets the deadline, the counts below it tried do not, cost is
// devices x time), and the arithmetic of time and batch is the documented one.
#include <doctest/doctest.h>

#include <cmath>

#include "search/capacity.hpp"

using namespace moesim;

namespace {

const SweepSpace& plan_space() {
  static const SweepSpace space(read_input("tests/data/sweep-plan.json", "scenarios", "SCENARIO"));
  return space;
}

}  // namespace

TEST_CASE("plan fit: the largest sequence that fits, and one step more that does not") {
  FitOptions o;
  o.vary = FitVariable::sequence_length;
  o.max_value = 1 << 17;
  const FitResult r = plan_fit(plan_space(), o);
  CHECK(r.granularity == 1024);
  REQUIRE(r.largest_fit.has_value());
  const double hbm = plan_space().base().hardware.device.hbm_capacity.value;
  CHECK(r.largest_fit->fits);
  CHECK(r.largest_fit->outcome.peak_hbm_bytes <= hbm);
  CHECK(r.largest_fit->value % r.granularity == 0);
  if (r.smallest_miss) {
    CHECK(r.smallest_miss->value == r.largest_fit->value + r.granularity);
    CHECK_FALSE(r.smallest_miss->fits);
  } else {
    CHECK(r.largest_fit->value == o.max_value);
  }
  // Every probe above the answer failed and every one at or below it fitted (the bisection's
  // premise held on this plan).
  for (const FitProbe& p : r.probes) {
    CAPTURE(p.value);
    CHECK(p.fits == (p.value <= r.largest_fit->value));
  }
}

TEST_CASE("plan fit: the micro-batch keeps the micro-steps per optimizer step") {
  FitOptions o;
  o.vary = FitVariable::micro_batch_size;
  o.max_value = 8;
  const FitResult r = plan_fit(plan_space(), o);
  CHECK(r.granularity == 1);
  REQUIRE(r.largest_fit.has_value());
  CHECK(r.largest_fit->value >= 1);
  for (const FitProbe& p : r.probes) CHECK(p.outcome.status != ConfigStatus::rejected);
}

TEST_CASE("plan devices: the fewest devices that meet the deadline, with time and cost") {
  DevicePlanOptions o;
  o.tokens = 2e10;
  o.days = 1;
  o.max_devices = 256;
  const DevicePlanResult r = plan_devices(plan_space(), o);
  CHECK(r.unit == 8);
  REQUIRE(r.answer.has_value());
  const PlanCandidate& a = *r.answer;
  CHECK(a.meets_deadline);
  CHECK(a.num_devices % r.unit == 0);
  CHECK(a.num_devices > r.unit);  // one node is too slow for this budget
  CHECK(a.train_s <= o.days * 86400.0);
  const double steps = std::ceil(o.tokens / static_cast<double>(a.tokens_per_step));
  CHECK(a.train_s == doctest::Approx(steps * a.outcome.step_time_s).epsilon(1e-12));
  CHECK(a.device_hours == doctest::Approx(static_cast<double>(a.num_devices) * a.train_s / 3600.0).epsilon(1e-12));
  // Weak scaling: the global batch is the data-parallel ranks times the scenario's micro-steps.
  const ScenarioSpec& spec = plan_space().base().spec;
  const int64_t micro_steps = spec.batch.global_batch_size / (spec.batch.micro_batch_size * spec.parallel.dp());
  CHECK(a.global_batch_size == spec.batch.micro_batch_size * a.shard * a.replicate * micro_steps);
  bool below_tried = false;
  for (const DeviceCountResult& c : r.counts) {
    if (c.num_devices < a.num_devices) {
      CHECK((!c.best || !c.plans[*c.best].meets_deadline));
    }
    below_tried = below_tried || c.num_devices == a.num_devices - r.unit;
  }
  CHECK(below_tried);
}
