// SPDX-License-Identifier: MIT
// Program: the ops one rank runs in one training step, in issue order, with their tensors,
// memory effects, buffers and dependencies in flat arrays. All ranks of a pipeline stage share
// one Program.
//
// Execution contract (simulator and executor alike): ops of one stream run in the order they
// appear; an op also waits for its explicit dependencies (`deps`, indices of earlier ops in any
// stream). A collective starts when every member of its group has reached it; members issue the
// same collectives of a group in the same order. A send/recv whose peer falls outside its group
// (the first or last member) does nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/op.hpp"

namespace moesim {

// Memory that lives the whole step on every rank of the program (bytes per rank).
struct PersistentMemory {
  double params = 0;            // sharded weights at their stored precision
  double master_params = 0;     // fp32 master copies of trainable weights
  double grads = 0;             // sharded gradients of trainable weights
  double optimizer_states = 0;
  double runtime = 0;           // the software stack: runtime reserve and communicator buffers
  // Of the state above, what CPU offload (parallel.fsdp.offload) keeps in host memory instead:
  // not in the fields above nor in total(), which are HBM.
  double host_params = 0;
  double host_master_params = 0;
  double host_grads = 0;
  double host_optimizer_states = 0;
  double total() const { return params + master_params + grads + optimizer_states + runtime; }
  double host_total() const { return host_params + host_master_params + host_grads + host_optimizer_states; }
};

struct Program {
  int64_t stage = 0;
  std::vector<Op> ops;
  std::vector<TensorDesc> tensors;
  std::vector<MemEffect> effects;
  std::vector<uint32_t> deps;
  std::vector<Buffer> buffers;
  std::vector<std::string> names;
  PersistentMemory persistent;

  std::span<const TensorDesc> inputs(const Op& op) const { return {tensors.data() + op.first_tensor, op.num_inputs}; }
  std::span<const TensorDesc> outputs(const Op& op) const {
    return {tensors.data() + op.first_tensor + op.num_inputs, op.num_outputs};
  }
  std::span<const MemEffect> effects_of(const Op& op) const { return {effects.data() + op.first_effect, op.num_effects}; }
  std::span<const uint32_t> deps_of(const Op& op) const { return {deps.data() + op.first_dep, op.num_deps}; }
  const std::string& name_of(const Op& op) const { return names[op.name]; }

  // Reserves room in every array for `factor` times what it holds now: a builder that has written
  // a part of the program it can scale up, so that the arrays are not copied and their pages
  // touched again each time they double (docs/performance.md, ninth pass).
  void reserve_scaled(double factor);
};

// Appends ops to a Program. Effects and dependencies may be added to the last op only, which
// keeps each op's ranges contiguous.
class ProgramWriter {
 public:
  explicit ProgramWriter(Program& program) : p_(program) {}

  uint32_t intern(std::string_view name);
  // Appends `op` (its name, tensors, effects and deps ranges are set here) and returns its index.
  uint32_t add(Op op, std::string_view name, std::span<const TensorDesc> inputs = {},
               std::span<const TensorDesc> outputs = {});
  void depend(uint32_t op, uint32_t on);  // op must be the last one added
  // Orders `op` (the last one added) after `on`: a dependency unless both run on one queue (whose
  // order already does it) or `op` has it already.
  void order_after(uint32_t op, uint32_t on);
  void effect(uint32_t op, uint32_t buffer, MemAction action);  // op must be the last one added
  uint32_t buffer(double bytes, MemCategory category, std::string_view name);
  uint32_t last() const { return static_cast<uint32_t>(p_.ops.size() - 1); }
  Program& program() { return p_; }
  const Program& program() const { return p_; }

 private:
  Program& p_;
  // The names this writer interned, by hash: an open-addressing table (linear probing, a power of
  // two of slots, at most half full) of ids into p_.names, which holds the only copy of each
  // name. Most of a step's names are new (one per layer and op), and a node-based map spent a
  // third of a graph build on allocating, hashing again and chasing its nodes.
  struct NameSlot {
    uint32_t id_plus_1 = 0;  // 0: empty
    uint32_t hash = 0;       // the low 32 bits of the name's hash (the probe start, and a cheap filter)
  };
  std::vector<NameSlot> name_slots_;
  size_t num_names_ = 0;
  void grow_names();
};

}  // namespace moesim
