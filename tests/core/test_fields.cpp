// SPDX-License-Identifier: MIT
// The field-declaration machinery on a small struct of every supported type.
#include <doctest/doctest.h>

#include "core/fields.hpp"

namespace moesim {

enum class Color { red, green };
template <>
struct EnumNames<Color> {
  static constexpr std::array<std::pair<std::string_view, Color>, 2> names{{{"red", Color::red}, {"green", Color::green}}};
};

struct Inner {
  int64_t n = 0;
};

struct Sample {
  int64_t count = 0;
  double ratio = 0;
  bool flag = false;
  std::string label;
  Color color = Color::red;
  BytesPerSecond bandwidth;
  LayerSet layers;
  std::vector<Inner> items;
  std::optional<Inner> extra;
};

template <class F>
void declare_fields(F& f, Inner& s) {
  f.required("n", s.n, "A number.", at_least(1));
}

template <class F>
void declare_fields(F& f, Sample& s) {
  f.required("count", s.count, "A count.", positive());
  f.optional("ratio", s.ratio, 0.5, "A ratio.", between(0, 1));
  f.optional("flag", s.flag, false, "A flag.");
  f.optional("label", s.label, std::string("none"), "A label.");
  f.optional("color", s.color, Color::green, "A color.");
  f.required("bandwidth", s.bandwidth, "A bandwidth.", positive());
  f.optional("layers", s.layers, LayerSet::all(), "Layers.");
  f.optional("items", s.items, std::vector<Inner>{}, "Items.");
  f.maybe("extra", s.extra, "An optional object.");
}

}  // namespace moesim

using namespace moesim;
using nlohmann::json;

namespace {

Sample read(const json& j) {
  Sample s;
  FieldReader::read_object("f.json", j, "", s);
  return s;
}

std::string error_of(const json& j) {
  try {
    (void)read(j);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

const json kGood = {{"count", 3}, {"bandwidth", "900 GB/s"}};

json with(const char* key, json value) {
  json j = kGood;
  j[key] = std::move(value);
  return j;
}

}  // namespace

TEST_CASE("declared fields are read, defaults applied") {
  const Sample s = read(kGood);
  CHECK(s.count == 3);
  CHECK(s.ratio == 0.5);
  CHECK(s.label == "none");
  CHECK(s.color == Color::green);
  CHECK(s.bandwidth.value == doctest::Approx(900e9));
  CHECK(s.layers.is_all());
  CHECK_FALSE(s.extra.has_value());

  const Sample t = read(with("items", json::array({{{"n", 1}}, {{"n", 2}}})));
  REQUIRE(t.items.size() == 2);
  CHECK(t.items[1].n == 2);
  CHECK(read(with("extra", {{"n", 7}})).extra->n == 7);
  CHECK(read(with("count", 4.0)).count == 4);  // an integral number written as a float is an integer
}

TEST_CASE("every error class names the file and the JSON path") {
  CHECK(error_of(json{{"bandwidth", "1 GB/s"}}) == "f.json: /count: missing required key");
  CHECK(error_of(with("cuont", 1)) == "f.json: /cuont: unknown key (see `moesim describe`)");
  CHECK(error_of(with("count", 0)) == "f.json: /count: must be positive, got 0");
  CHECK(error_of(with("count", "3")) == "f.json: /count: expected an integer, got a string \"3\"");
  CHECK(error_of(with("count", 2.5)) == "f.json: /count: expected an integer, got a number 2.5");
  CHECK(error_of(with("count", json::array())) == "f.json: /count: expected an integer, got an array []");
  CHECK(error_of(with("count", 18446744073709551615ull)) == "f.json: /count: integer 18446744073709551615 is too large");
  CHECK(error_of(with("ratio", 1.5)) == "f.json: /ratio: must be in [0, 1], got 1.5");
  CHECK(error_of(with("flag", 1)) == "f.json: /flag: expected true or false, got an integer 1");
  CHECK(error_of(with("color", "blue")) == "f.json: /color: 'blue' is not one of red | green");
  CHECK(error_of(with("bandwidth", "-1 GB/s")) == "f.json: /bandwidth: must be positive, got '-1 GB/s'");
  CHECK(error_of(with("bandwidth", 5)).starts_with("f.json: /bandwidth: expected a quantity with a unit"));
  CHECK(error_of(with("bandwidth", "5")).starts_with("f.json: /bandwidth: '5' has no unit"));
  CHECK(error_of(with("layers", "3-1")).starts_with("f.json: /layers: layer range"));
  CHECK(error_of(with("items", json::array({{{"n", 1}}, {{"n", 0}}}))) == "f.json: /items/1/n: must be >= 1, got 0");
  CHECK(error_of(with("items", json::array({{{"n", 1}, {"m", 2}}}))) == "f.json: /items/0/m: unknown key (see `moesim describe`)");
  CHECK(error_of(with("extra", 3)) == "f.json: /extra: expected an object, got an integer");
  CHECK(error_of(json::array()) == "f.json: /: expected an object, got an array");
}

TEST_CASE("the describer lists every field with type, default and doc") {
  const auto rows = FieldDescriber::describe<Sample>();
  std::vector<std::string> paths;
  for (const auto& r : rows) paths.push_back(r.path);
  CHECK(paths == std::vector<std::string>{"/count", "/ratio", "/flag", "/label", "/color", "/bandwidth", "/layers",
                                          "/items", "/items/*/n", "/extra", "/extra/n"});
  CHECK(rows[0].type == "integer > 0");
  CHECK(rows[0].default_value.empty());  // required
  CHECK(rows[1].type == "number in [0, 1]");
  CHECK(rows[1].default_value == "0.5");
  CHECK(rows[4].type == "one of red | green");
  CHECK(rows[4].default_value == "green");
  CHECK(rows[5].type == "bytes/s > 0");
  CHECK(rows[6].default_value == "\"all\"");
  CHECK(rows[7].type == "array of object");
  CHECK(rows[9].default_value == "absent");
  CHECK(rows[8].doc == "A number.");
}
