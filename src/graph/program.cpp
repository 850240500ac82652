// SPDX-License-Identifier: MIT
#include "graph/program.hpp"

#include "graph/queues.hpp"

#include <algorithm>
#include <cassert>

namespace moesim {

void Program::reserve_scaled(double factor) {
  const auto scaled = [factor](size_t n) { return static_cast<size_t>(static_cast<double>(n) * factor); };
  ops.reserve(scaled(ops.size()));
  tensors.reserve(scaled(tensors.size()));
  effects.reserve(scaled(effects.size()));
  deps.reserve(scaled(deps.size()));
  buffers.reserve(scaled(buffers.size()));
  names.reserve(scaled(names.size()));
}

uint32_t ProgramWriter::intern(std::string_view name) {
  if (2 * (num_names_ + 1) > name_slots_.size()) grow_names();
  const auto hash = static_cast<uint32_t>(std::hash<std::string_view>{}(name));
  const size_t mask = name_slots_.size() - 1;
  size_t i = hash & mask;
  for (; name_slots_[i].id_plus_1 != 0; i = (i + 1) & mask) {
    const NameSlot& slot = name_slots_[i];
    if (slot.hash == hash && p_.names[slot.id_plus_1 - 1] == name) return slot.id_plus_1 - 1;
  }
  const auto id = static_cast<uint32_t>(p_.names.size());
  p_.names.emplace_back(name);
  name_slots_[i] = NameSlot{id + 1, hash};
  ++num_names_;
  return id;
}

void ProgramWriter::grow_names() {
  std::vector<NameSlot> old = std::move(name_slots_);
  name_slots_.assign(std::max<size_t>(1024, 2 * old.size()), NameSlot{});
  const size_t mask = name_slots_.size() - 1;
  for (const NameSlot& slot : old) {
    if (slot.id_plus_1 == 0) continue;
    size_t i = slot.hash & mask;
    while (name_slots_[i].id_plus_1 != 0) i = (i + 1) & mask;
    name_slots_[i] = slot;
  }
}

uint32_t ProgramWriter::add(Op op, std::string_view name, std::span<const TensorDesc> inputs,
                            std::span<const TensorDesc> outputs) {
  op.name = intern(name);
  op.first_tensor = static_cast<uint32_t>(p_.tensors.size());
  op.num_inputs = static_cast<uint16_t>(inputs.size());
  op.num_outputs = static_cast<uint16_t>(outputs.size());
  p_.tensors.insert(p_.tensors.end(), inputs.begin(), inputs.end());
  p_.tensors.insert(p_.tensors.end(), outputs.begin(), outputs.end());
  op.first_effect = static_cast<uint32_t>(p_.effects.size());
  op.num_effects = 0;
  op.first_dep = static_cast<uint32_t>(p_.deps.size());
  op.num_deps = 0;
  p_.ops.push_back(op);
  return last();
}

void ProgramWriter::depend(uint32_t op, uint32_t on) {
  assert(op == last() && on < op);
  p_.deps.push_back(on);
  ++p_.ops[op].num_deps;
}

void ProgramWriter::order_after(uint32_t op, uint32_t on) {
  if (queue_of(p_.ops[op]) == queue_of(p_.ops[on])) return;
  for (uint32_t d : p_.deps_of(p_.ops[op])) {
    if (d == on) return;
  }
  depend(op, on);
}

void ProgramWriter::effect(uint32_t op, uint32_t buffer, MemAction action) {
  assert(op == last());
  p_.effects.push_back(MemEffect{buffer, action});
  ++p_.ops[op].num_effects;
}

uint32_t ProgramWriter::buffer(double bytes, MemCategory category, std::string_view name) {
  p_.buffers.push_back(Buffer{bytes, category, intern(name)});
  return static_cast<uint32_t>(p_.buffers.size() - 1);
}

}  // namespace moesim
