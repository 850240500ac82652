// SPDX-License-Identifier: MIT
#include "analysis/fusion.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "engine/power_runs.hpp"
#include "graph/graph_checks.hpp"
#include "graph/queues.hpp"

namespace moesim {

namespace {

constexpr bool is_memory_bound(OpKind k) {
  return k == OpKind::norm || k == OpKind::activation || k == OpKind::elementwise;
}
constexpr bool is_matmul(OpKind k) {
  return k == OpKind::gemm || k == OpKind::lora_gemm || k == OpKind::grouped_gemm;
}

bool on_compute_queue(const Op& op) {
  return queue_of(op) == kComputeQueue && op.stream == Stream::compute && !is_communication(op.kind);
}

// "layer12.attn_norm.bwd" -> "attn_norm": the layer prefix and the backward suffix dropped.
std::string base_name(const std::string& name) {
  std::string s = name;
  if (s.rfind("layer", 0) == 0) {
    size_t i = 5;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0) ++i;
    if (i > 5 && i < s.size() && s[i] == '.') s = s.substr(i + 1);
  }
  constexpr std::string_view bwd = ".bwd";
  if (s.size() > bwd.size() && s.compare(s.size() - bwd.size(), bwd.size(), bwd) == 0) s.resize(s.size() - bwd.size());
  return s;
}

// Per op of a program: who allocates and frees each buffer, and who waits across queues.
struct ProgramFacts {
  std::vector<int64_t> alloc_by, free_by;     // per buffer: the op, -1 if none
  std::vector<bool> waited_on_off_queue;      // per op: an op of another queue depends on it
  std::vector<bool> waits_off_queue;          // per op: it depends on an op of another queue

  explicit ProgramFacts(const Program& p)
      : alloc_by(p.buffers.size(), -1),
        free_by(p.buffers.size(), -1),
        waited_on_off_queue(p.ops.size()),
        waits_off_queue(p.ops.size()) {
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const Op& op = p.ops[i];
      for (const MemEffect& e : p.effects_of(op)) {
        if (e.action == MemAction::alloc) alloc_by[e.buffer] = static_cast<int64_t>(i);
        if (e.action == MemAction::free) free_by[e.buffer] = static_cast<int64_t>(i);
      }
      for (uint32_t d : p.deps_of(op)) {
        if (queue_of(p.ops[d]) != queue_of(op)) {
          waited_on_off_queue[d] = true;
          waits_off_queue[i] = true;
        }
      }
    }
  }
};

// The buffers op i allocates and op j frees (activations and gradients): the intermediates
// between them.
std::vector<uint32_t> intermediates(const Program& p, const ProgramFacts& f, uint32_t i, uint32_t j) {
  std::vector<uint32_t> out;
  for (const MemEffect& e : p.effects_of(p.ops[i])) {
    if (e.action != MemAction::alloc) continue;
    const Buffer& b = p.buffers[e.buffer];
    if (b.category != MemCategory::activation && b.category != MemCategory::gradient) continue;
    if (f.free_by[e.buffer] == static_cast<int64_t>(j)) out.push_back(e.buffer);
  }
  return out;
}

// Ops i and i + 1 may be fused: the rules of fusion.hpp.
bool fusible_pair(const Program& p, const ProgramFacts& f, uint32_t i) {
  const Op& x = p.ops[i];
  const Op& y = p.ops[i + 1];
  if (!on_compute_queue(x) || !on_compute_queue(y)) return false;
  if (!is_memory_bound(y.kind) || !(is_memory_bound(x.kind) || is_matmul(x.kind))) return false;
  if (x.phase != y.phase || x.layer != y.layer || x.micro != y.micro) return false;
  if (x.routing_layer >= 0 && y.routing_layer >= 0 && x.routing_layer != y.routing_layer) return false;
  if (f.waited_on_off_queue[i] || f.waits_off_queue[i + 1]) return false;
  return !intermediates(p, f, i, i + 1).empty();
}

// The chains of a program: maximal runs of fusible adjacent pairs.
std::vector<FusionChain> chains_of(const Program& p, const ProgramFacts& f, uint32_t program) {
  std::vector<FusionChain> out;
  const auto n = static_cast<uint32_t>(p.ops.size());
  uint32_t i = 0;
  while (i + 1 < n) {
    if (!fusible_pair(p, f, i)) {
      ++i;
      continue;
    }
    uint32_t j = i + 1;
    while (j + 1 < n && fusible_pair(p, f, j)) ++j;
    out.push_back(FusionChain{program, i, j - i + 1});
    i = j;  // j may not head another chain (a chain's ops are disjoint): continue after it
    ++i;
  }
  return out;
}

// The chain's intermediate buffers: allocated by one of its ops and freed by the next.
std::vector<uint32_t> chain_intermediates(const Program& p, const ProgramFacts& f, const FusionChain& c) {
  std::vector<uint32_t> out;
  for (uint32_t k = 0; k + 1 < c.count; ++k) {
    for (uint32_t b : intermediates(p, f, c.first + k, c.first + k + 1)) out.push_back(b);
  }
  return out;
}

}  // namespace

std::string FusionCandidate::key() const {
  std::string k = rule == FusionRule::matmul_epilogue ? "epilogue:" : "chain:";
  for (const std::string& o : ops) k += o + ";";
  return k;
}

std::vector<FusionCandidate> find_fusion_candidates(const StepGraph& graph) {
  std::map<std::string, FusionCandidate> by_key;
  std::vector<int64_t> ranks_of(graph.programs.size(), 0);
  for (int64_t r = 0; r < graph.plan.num_ranks(); ++r) {
    const int64_t prog = graph.programs.size() == 1 ? 0 : graph.plan.program_of(r);
    if (prog >= 0 && prog < static_cast<int64_t>(ranks_of.size())) ++ranks_of[static_cast<size_t>(prog)];
  }
  struct PerProgram {
    int64_t occurrences = 0, launches = 0;
    double bytes = 0;
  };
  std::map<std::string, std::vector<PerProgram>> per_program;
  for (size_t pi = 0; pi < graph.programs.size(); ++pi) {
    const Program& p = graph.programs[pi];
    const ProgramFacts f(p);
    for (const FusionChain& c : chains_of(p, f, static_cast<uint32_t>(pi))) {
      const Op& head = p.ops[c.first];
      FusionCandidate cand;
      cand.rule = is_matmul(head.kind) ? FusionRule::matmul_epilogue : FusionRule::memory_bound_chain;
      for (uint32_t k = 0; k < c.count; ++k) {
        const Op& op = p.ops[c.first + k];
        cand.ops.push_back(base_name(p.name_of(op)));
        cand.kinds.push_back(op.kind);
      }
      // A backward chain runs its forward ops in reverse.
      if (head.phase == Phase::bwd) std::reverse(cand.ops.begin(), cand.ops.end());
      const std::string key = cand.key();
      auto [it, inserted] = by_key.try_emplace(key, std::move(cand));
      FusionCandidate& cd = it->second;
      if (std::find(cd.phases.begin(), cd.phases.end(), head.phase) == cd.phases.end()) cd.phases.push_back(head.phase);
      cd.chains.push_back(c);
      double bytes = 0, largest = 0;
      for (uint32_t b : chain_intermediates(p, f, c)) {
        bytes += p.buffers[b].bytes;
        largest = std::max(largest, p.buffers[b].bytes);
      }
      cd.transient_bytes_avoided = std::max(cd.transient_bytes_avoided, largest);
      auto& pp = per_program[key];
      pp.resize(graph.programs.size());
      pp[pi].occurrences += 1;
      pp[pi].launches += c.count - 1;
      pp[pi].bytes += 2 * bytes;
      // Constraints: what a kernel for it has to handle.
      auto note = [&](const std::string& s) {
        if (std::find(cd.constraints.begin(), cd.constraints.end(), s) == cd.constraints.end()) cd.constraints.push_back(s);
      };
      Dtype dt = head.dtype;
      for (uint32_t k = 0; k < c.count; ++k) {
        const Op& op = p.ops[c.first + k];
        if (op.routing_layer >= 0) note("sizes set by routing (rows per expert vary by rank and step)");
        if (op.dtype != dt) note("mixed compute formats within the chain");
      }
      if (is_matmul(head.kind)) note("GEMM with a custom epilogue (cuBLASLt / CUTLASS epilogue visitor)");
      if (head.kind == OpKind::grouped_gemm) note("grouped GEMM epilogue (per-expert row ranges)");
      if (head.phase == Phase::bwd) note("backward kernels (the chain's gradients, in reverse order)");
      for (uint32_t k = 0; k < c.count; ++k) {
        if (p.ops[c.first + k].kind == OpKind::norm) note("a norm in the chain: row reduction, whole rows per block");
      }
    }
  }
  std::vector<FusionCandidate> out;
  for (auto& [key, cand] : by_key) {
    const auto& pp = per_program[key];
    for (size_t pi = 0; pi < pp.size(); ++pi) {
      cand.occurrences_per_rank = std::max(cand.occurrences_per_rank, pp[pi].occurrences);
      cand.launches_saved_per_rank = std::max(cand.launches_saved_per_rank, pp[pi].launches);
      cand.hbm_bytes_saved_per_rank = std::max(cand.hbm_bytes_saved_per_rank, pp[pi].bytes);
      cand.hbm_bytes_saved_all_ranks += pp[pi].bytes * static_cast<double>(ranks_of[pi]);
    }
    std::sort(cand.phases.begin(), cand.phases.end());
    out.push_back(std::move(cand));
  }
  std::stable_sort(out.begin(), out.end(), [](const FusionCandidate& a, const FusionCandidate& b) {
    if (a.hbm_bytes_saved_per_rank != b.hbm_bytes_saved_per_rank) return a.hbm_bytes_saved_per_rank > b.hbm_bytes_saved_per_rank;
    return a.key() < b.key();
  });
  return out;
}

namespace {

// `p` with each chain (sorted, disjoint, of this program) fused.
Program fuse_program(const Program& p, std::vector<FusionChain> chains) {
  std::sort(chains.begin(), chains.end(), [](const FusionChain& a, const FusionChain& b) { return a.first < b.first; });
  const ProgramFacts f(p);
  const size_t n = p.ops.size();
  std::vector<int64_t> chain_at(n, -1);  // op -> index of its chain
  for (size_t c = 0; c < chains.size(); ++c) {
    const FusionChain& ch = chains[c];
    if (ch.count < 2 || ch.first + ch.count > n) throw std::logic_error("fusion: a chain outside its program");
    for (uint32_t k = 0; k < ch.count; ++k) {
      if (chain_at[ch.first + k] >= 0) throw std::logic_error("fusion: overlapping chains");
      chain_at[ch.first + k] = static_cast<int64_t>(c);
    }
  }
  // Intermediate buffers disappear; the rest are renumbered.
  std::vector<bool> dropped(p.buffers.size());
  std::vector<std::vector<uint32_t>> inter(chains.size());
  for (size_t c = 0; c < chains.size(); ++c) {
    inter[c] = chain_intermediates(p, f, chains[c]);
    for (uint32_t b : inter[c]) dropped[b] = true;
  }
  Program out;
  out.stage = p.stage;
  out.persistent = p.persistent;
  ProgramWriter w(out);
  std::vector<uint32_t> buffer_map(p.buffers.size(), UINT32_MAX);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (dropped[b]) continue;
    const Buffer& buf = p.buffers[b];
    buffer_map[b] = w.buffer(buf.bytes, buf.category, p.names[buf.name]);
  }
  std::vector<uint32_t> op_map(n, UINT32_MAX);
  auto add_deps = [&](uint32_t idx, std::span<const uint32_t> deps) {
    std::vector<uint32_t> seen;
    for (uint32_t d : deps) {
      const uint32_t nd = op_map[d];
      if (nd == UINT32_MAX || nd >= idx) throw std::logic_error("fusion: a dependency on a later op");
      if (std::find(seen.begin(), seen.end(), nd) != seen.end()) continue;
      seen.push_back(nd);
      w.depend(idx, nd);
    }
  };
  size_t i = 0;
  while (i < n) {
    const Op& op = p.ops[i];
    if (chain_at[i] < 0) {
      const uint32_t idx = w.add(op, p.name_of(op), p.inputs(op), p.outputs(op));
      op_map[i] = idx;
      add_deps(idx, p.deps_of(op));
      for (const MemEffect& e : p.effects_of(op)) w.effect(idx, buffer_map[e.buffer], e.action);
      ++i;
      continue;
    }
    const auto c = static_cast<size_t>(chain_at[i]);
    const FusionChain& ch = chains[c];
    const std::vector<uint32_t>& mids = inter[c];
    const Op& head = p.ops[ch.first];
    Op fused = head;
    fused.flops = 0;
    fused.bytes_read = 0;
    fused.bytes_written = 0;
    double mid_bytes = 0;
    for (uint32_t b : mids) mid_bytes += p.buffers[b].bytes;
    std::string name = p.name_of(head);
    const std::string prefix = name.substr(0, name.size() - base_name(name).size() -
                                                  (name.size() >= 4 && name.ends_with(".bwd") ? 4 : 0));
    std::vector<TensorDesc> ins, outs;
    std::vector<uint32_t> deps;
    for (uint32_t k = 0; k < ch.count; ++k) {
      const uint32_t oi = ch.first + k;
      const Op& m = p.ops[oi];
      fused.flops += m.flops;
      fused.bytes_read += m.bytes_read;
      fused.bytes_written += m.bytes_written;
      fused.trainable_weight = fused.trainable_weight || m.trainable_weight;
      if (fused.routing_layer < 0) fused.routing_layer = m.routing_layer;
      if (k > 0) {
        const std::string& mn = p.name_of(m);
        name += "+" + (mn.rfind(prefix, 0) == 0 ? mn.substr(prefix.size()) : mn);
      }
      // Tensors: an intermediate is neither an output of its producer nor an input of its reader.
      std::vector<TensorDesc> mi(p.inputs(m).begin(), p.inputs(m).end());
      std::vector<TensorDesc> mo(p.outputs(m).begin(), p.outputs(m).end());
      for (uint32_t b : mids) {
        auto drop_one = [&](std::vector<TensorDesc>& v) {
          auto it = std::find_if(v.begin(), v.end(), [&](const TensorDesc& t) { return t.bytes() == p.buffers[b].bytes; });
          if (it != v.end()) v.erase(it);
        };
        if (f.free_by[b] == static_cast<int64_t>(oi)) drop_one(mi);
        if (f.alloc_by[b] == static_cast<int64_t>(oi)) drop_one(mo);
      }
      ins.insert(ins.end(), mi.begin(), mi.end());
      outs.insert(outs.end(), mo.begin(), mo.end());
      for (uint32_t d : p.deps_of(m)) {
        if (d >= ch.first && d < ch.first + ch.count) continue;
        deps.push_back(d);
      }
    }
    fused.bytes_read = std::max(0.0, fused.bytes_read - mid_bytes);
    fused.bytes_written = std::max(0.0, fused.bytes_written - mid_bytes);
    const uint32_t idx = w.add(fused, name, ins, outs);
    for (uint32_t k = 0; k < ch.count; ++k) op_map[ch.first + k] = idx;
    add_deps(idx, deps);
    // Effects: allocations first (at the fused op's start), then the rest, as the ops had them.
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t k = 0; k < ch.count; ++k) {
        for (const MemEffect& e : p.effects_of(p.ops[ch.first + k])) {
          if (dropped[e.buffer]) continue;
          if ((e.action == MemAction::alloc) != (pass == 0)) continue;
          w.effect(idx, buffer_map[e.buffer], e.action);
        }
      }
    }
    i = ch.first + ch.count;
  }
  return out;
}

double peak_of(const StepResult& r) {
  double peak = 0;
  for (const RankMemory& m : r.memory) peak = std::max(peak, m.peak_hbm_bytes);
  return peak;
}

double seconds(Picoseconds t) { return static_cast<double>(t) * 1e-12; }

}  // namespace

StepGraph apply_fusions(const StepGraph& graph, const std::vector<FusionChain>& chains) {
  std::vector<std::vector<FusionChain>> per(graph.programs.size());
  for (const FusionChain& c : chains) {
    if (c.program >= per.size()) throw std::logic_error("fusion: a chain of a program the graph lacks");
    per[c.program].push_back(c);
  }
  StepGraph out;
  out.scenario = graph.scenario;
  out.source = graph.source;
  out.plan = graph.plan;
  if (graph.routing) {  // not copyable: the same sampler rebuilt (as import_graph_json does)
    const RoutingSampler& r = *graph.routing;
    out.routing.emplace(r.spec(), r.num_experts(), r.top_k(), r.ep(),
                        std::vector<double>(r.histogram().begin(), r.histogram().end()), r.ep_ranks_per_node());
  }
  out.num_micro_batches = graph.num_micro_batches;
  out.tokens_per_micro_batch = graph.tokens_per_micro_batch;
  out.tokens_per_step = graph.tokens_per_step;
  out.seq_len = graph.seq_len;
  out.allocator_fragmentation = graph.allocator_fragmentation;
  out.host_op_issue_s = graph.host_op_issue_s;
  out.host_kernel_issue_s = graph.host_kernel_issue_s;
  out.expert_dispatch = graph.expert_dispatch;
  for (size_t pi = 0; pi < graph.programs.size(); ++pi) {
    out.programs.push_back(per[pi].empty() ? graph.programs[pi] : fuse_program(graph.programs[pi], per[pi]));
  }
  return out;
}

FusionAnalysis analyse_fusions(const StepGraph& graph, const CostModel& cost, const FusionAnalysisOptions& options) {
  FusionAnalysis a;
  a.scenario = graph.scenario;
  a.greedy = options.greedy;
  a.candidates = find_fusion_candidates(graph);
  // Each graph in its own power state, as `simulate` runs it (engine/power_runs.hpp).
  auto run = [&](const StepGraph& g) {
    ++a.simulations;
    return simulate_step_in_power_state(g, cost, options.engine).results.front();
  };
  auto simulate = [&](const std::vector<int32_t>& chosen, double& step_s, double& peak) {
    std::vector<FusionChain> chains;
    for (int32_t c : chosen) {
      const auto& cc = a.candidates[static_cast<size_t>(c)].chains;
      chains.insert(chains.end(), cc.begin(), cc.end());
    }
    const StepGraph g = apply_fusions(graph, chains);
    if (options.check) {
      const auto errors = check_step_graph(g);
      if (!errors.empty()) throw std::logic_error("fusion: the rewritten graph fails a check: " + errors.front());
    }
    const StepResult r = run(g);
    step_s = seconds(r.step_time);
    peak = peak_of(r);
  };
  {
    const StepResult r = run(graph);
    a.baseline_step_s = seconds(r.step_time);
    a.baseline_peak_hbm_bytes = peak_of(r);
  }
  for (size_t c = 0; c < a.candidates.size(); ++c) {
    FusionGain g;
    g.candidate = static_cast<int32_t>(c);
    simulate({g.candidate}, g.step_time_s, g.peak_hbm_bytes);
    g.step_delta_s = g.step_time_s - a.baseline_step_s;
    g.peak_delta_bytes = g.peak_hbm_bytes - a.baseline_peak_hbm_bytes;
    a.gains.push_back(g);
  }
  std::stable_sort(a.gains.begin(), a.gains.end(), [](const FusionGain& x, const FusionGain& y) {
    return x.step_delta_s < y.step_delta_s;
  });
  // Greedy: from the `top` best alone, repeatedly add the one whose addition gives the shortest step.
  std::vector<int32_t> pool;
  for (size_t k = 0; k < a.gains.size() && static_cast<int64_t>(k) < options.top; ++k) pool.push_back(a.gains[k].candidate);
  std::vector<int32_t> chosen;
  while (!pool.empty()) {
    if (!options.greedy) {  // in the order of the gains alone: one simulation per step
      std::vector<int32_t> trial = chosen;
      trial.push_back(pool.front());
      double s = 0, peak = 0;
      simulate(trial, s, peak);
      chosen.push_back(pool.front());
      a.cumulative.push_back(FusionCumulative{pool.front(), s, peak});
      pool.erase(pool.begin());
      continue;
    }
    size_t best = 0;
    double best_s = 0, best_peak = 0;
    for (size_t k = 0; k < pool.size(); ++k) {
      std::vector<int32_t> trial = chosen;
      trial.push_back(pool[k]);
      double s = 0, peak = 0;
      simulate(trial, s, peak);
      if (k == 0 || s < best_s) {
        best = k;
        best_s = s;
        best_peak = peak;
      }
    }
    chosen.push_back(pool[best]);
    a.cumulative.push_back(FusionCumulative{pool[best], best_s, best_peak});
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(best));
  }
  return a;
}

}  // namespace moesim
