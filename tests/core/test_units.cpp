// SPDX-License-Identifier: MIT
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "core/units.hpp"

using namespace moesim;

TEST_CASE("quantities parse into SI base units") {
  CHECK(parse<Dimension::bytes_per_s>("900 GB/s").value == doctest::Approx(900e9));
  CHECK(parse<Dimension::bytes>("141 GiB").value == doctest::Approx(141.0 * 1024 * 1024 * 1024));
  CHECK(parse<Dimension::bytes>("141 GB").value == doctest::Approx(141e9));
  CHECK(parse<Dimension::seconds>("1.5 us").value == doctest::Approx(1.5e-6));
  CHECK(parse<Dimension::seconds>("1.5us").value == doctest::Approx(1.5e-6));
  CHECK(parse<Dimension::seconds>("250 ns").value == doctest::Approx(250e-9));
  CHECK(parse<Dimension::seconds>("3 ms").value == doctest::Approx(3e-3));
  CHECK(parse<Dimension::flops_per_s>("989 TFLOP/s").value == doctest::Approx(989e12));
  CHECK(parse<Dimension::flops_per_s>("2.5 PFLOP/s").value == doctest::Approx(2.5e15));
  CHECK(parse<Dimension::flops>("12.2 MFLOP").value == doctest::Approx(12.2e6));
}

TEST_CASE("power is in watts with decimal prefixes") {
  CHECK(parse<Dimension::watts>("700 W").value == doctest::Approx(700.0));
  CHECK(parse<Dimension::watts>("1.2 KW").value == doctest::Approx(1200.0));
  CHECK_THROWS_AS(parse<Dimension::watts>("700 w"), ValueError);
  CHECK_THROWS_AS(parse<Dimension::watts>("1 KiW"), ValueError);
  CHECK(format(Watts{500.0}) == "500 W");
}

TEST_CASE("bits are an eighth of bytes; case matters") {
  CHECK(parse<Dimension::bytes_per_s>("400 Gb/s").value == doctest::Approx(50e9));
  CHECK(parse<Dimension::bytes_per_s>("400 GB/s").value == doctest::Approx(400e9));
  CHECK(parse<Dimension::bytes>("8 b").value == doctest::Approx(1.0));
}

TEST_CASE("a missing or wrong unit is an error that lists the accepted units") {
  CHECK_THROWS_WITH_AS(parse<Dimension::bytes>("141"), doctest::Contains("has no unit"), ValueError);
  CHECK_THROWS_WITH_AS(parse<Dimension::bytes_per_s>("4.8 TB"), doctest::Contains("'TB' is not a unit of bytes/s"),
                       ValueError);
  CHECK_THROWS_WITH_AS(parse<Dimension::seconds>("2 usec"), doctest::Contains("s, ms, us, ns, ps"), ValueError);
  CHECK_THROWS_AS(parse<Dimension::flops_per_s>("989 TFLOPS"), ValueError);
  CHECK_THROWS_AS(parse<Dimension::flops_per_s>("989 tflop/s"), ValueError);
  CHECK_THROWS_AS(parse<Dimension::bytes>("GB 141"), ValueError);
  CHECK_THROWS_AS(parse<Dimension::bytes>(""), ValueError);
  CHECK_THROWS_AS(parse<Dimension::seconds>("1 Gis"), ValueError);  // no binary prefixes on time
  CHECK_THROWS_AS(parse<Dimension::flops>("1 KiFLOP"), ValueError);
}

TEST_CASE("negative numbers parse; bounds are the field's business") {
  CHECK(parse<Dimension::bytes_per_s>("-4.8 TB/s").value == doctest::Approx(-4.8e12));
}

TEST_CASE("formatting picks a decimal prefix and round-trips") {
  CHECK(format(Bytes{141e9}) == "141 GB");
  CHECK(format(BytesPerSecond{4.8e12}) == "4.8 TB/s");
  CHECK(format(Seconds{1.5e-6}) == "1.5 us");
  CHECK(format(Seconds{2.0}) == "2 s");
  CHECK(format(FlopsPerSecond{989e12}) == "989 TFLOP/s");
  for (double v : {1.0, 3.2e12, 7.5e-9, 123456.0}) {
    CHECK(parse<Dimension::seconds>(format(Seconds{v})).value == doctest::Approx(v).epsilon(1e-3));
    CHECK(parse<Dimension::bytes>(format(Bytes{v})).value == doctest::Approx(v).epsilon(1e-3));
  }
  CHECK(format_bytes_binary(1.5 * 1024 * 1024 * 1024) == "1.5 GiB");
}
