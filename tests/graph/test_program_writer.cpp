// SPDX-License-Identifier: MIT
// ProgramWriter's name table: each distinct name is stored once and always gets the id of its
// first interning, across the table's growth (tens of thousands of names, as a step has), for op
// and buffer names alike; ids are dense and in order of first appearance.
#include <doctest/doctest.h>

#include <string>

#include "graph/program.hpp"

using namespace moesim;

TEST_CASE("intern: one id per distinct name, in order of first appearance, through growth") {
  Program p;
  ProgramWriter w(p);
  constexpr int kNames = 40000;  // past several doublings of the table
  for (int i = 0; i < kNames; ++i) CHECK(w.intern("layer" + std::to_string(i) + ".attn.q_proj") == static_cast<uint32_t>(i));
  REQUIRE(p.names.size() == static_cast<size_t>(kNames));
  // Again, in another order: the same ids, nothing added.
  for (int i = kNames - 1; i >= 0; i -= 7) CHECK(w.intern("layer" + std::to_string(i) + ".attn.q_proj") == static_cast<uint32_t>(i));
  CHECK(p.names.size() == static_cast<size_t>(kNames));
  for (int i = 0; i < kNames; i += 997) CHECK(p.names[static_cast<size_t>(i)] == "layer" + std::to_string(i) + ".attn.q_proj");
  // Ops and buffers share the table; the empty name is a name too.
  Op op;
  const uint32_t a = w.add(op, "layer3.attn.q_proj");
  CHECK(p.ops[a].name == 3u);
  const uint32_t b = w.buffer(8, MemCategory::activation, "layer3.attn.q_proj");
  CHECK(p.buffers[b].name == 3u);
  CHECK(w.intern("") == static_cast<uint32_t>(kNames));
  CHECK(w.intern("") == static_cast<uint32_t>(kNames));
  CHECK(p.names.size() == static_cast<size_t>(kNames + 1));
}
