// SPDX-License-Identifier: MIT
#include "trace/trace_match.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <deque>
#include <tuple>
#include <unordered_map>

#include "core/enum_names.hpp"
#include "core/error.hpp"

namespace moesim {

std::string_view kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::gemm: return "gemm";
    case KernelClass::grouped_gemm: return "grouped_gemm";
    case KernelClass::attention: return "attention";
    case KernelClass::norm: return "norm";
    case KernelClass::elementwise: return "elementwise";
    case KernelClass::copy: return "copy";
    case KernelClass::memset: return "memset";
    case KernelClass::all_gather: return "all_gather";
    case KernelClass::reduce_scatter: return "reduce_scatter";
    case KernelClass::all_reduce: return "all_reduce";
    case KernelClass::all_to_all: return "all_to_all";
    case KernelClass::send_recv: return "send_recv";
    case KernelClass::other_comm: return "other_comm";
    case KernelClass::other: return "other";
  }
  return "other";
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative wildcard match with one backtrack point ('*' only), case-insensitive.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  auto eq = [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b)); };
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && eq(pattern[p], text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

KernelClass classify_kernel(std::string_view name, GpuActivity activity) {
  if (activity == GpuActivity::memcpy) return KernelClass::copy;
  if (activity == GpuActivity::memset) return KernelClass::memset;
  for (const KernelRule& r : kKernelRules) {
    if (glob_match(r.pattern, name)) return r.cls;
  }
  return KernelClass::other;
}

RangeMeaning range_meaning(std::string_view range_name) {
  for (const RangeRule& r : kRangeRules) {
    if (glob_match(r.pattern, range_name)) return r.meaning;
  }
  return RangeMeaning::unknown;
}

std::string fold_layer(const std::string& name) {
  if (!name.starts_with("layer")) return name;
  size_t i = 5;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 5 || i >= name.size() || name[i] != '.') return name;
  return "layer*" + name.substr(i);
}

std::string_view op_family(OpKind kind) {
  switch (kind) {
    case OpKind::gemm:
    case OpKind::lora_gemm: return "gemm";
    case OpKind::grouped_gemm: return "grouped_gemm";
    case OpKind::flash_attention:
    case OpKind::sparse_attention:
    case OpKind::dsa_indexer:
    case OpKind::indexer_score:
    case OpKind::kda:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::kda_state_correction: return "attention";
    case OpKind::norm: return "norm";
    case OpKind::activation:
    case OpKind::elementwise:
    case OpKind::short_conv:
    case OpKind::kda_gate_cumsum:
    case OpKind::topk:
    case OpKind::kv_gather:
    case OpKind::attention_residual: return "elementwise";
    case OpKind::grad_accumulate:
    case OpKind::dp_copy: return "data_parallel";
    case OpKind::router:
    case OpKind::permute:
    case OpKind::unpermute: return "moe_routing";
    case OpKind::embedding: return "embedding";
    case OpKind::cross_entropy:
    case OpKind::cce_loss: return "loss";
    case OpKind::optimizer: return "optimizer";
    case OpKind::host_optimizer: return "host_optimizer";  // on the CPU: no kernel in a trace
    case OpKind::swap_out:
    case OpKind::swap_in: return "host_copy";
    case OpKind::all_gather: return "all_gather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::send:
    case OpKind::recv: return "send_recv";
  }
  return "elementwise";  // unreachable: every OpKind is listed above
}

double TraceMatch::step_seconds() const {
  std::vector<double> spans;
  for (const StepMeasure& s : steps) spans.push_back(s.gpu_span_s);
  if (spans.empty()) return 0;
  std::sort(spans.begin(), spans.end());
  const size_t n = spans.size();
  return n % 2 ? spans[n / 2] : 0.5 * (spans[n / 2 - 1] + spans[n / 2]);
}

namespace {

constexpr double kUs = 1e-6;

// The communication kinds of the graph a communication kernel class may stand for.
bool comm_matches(KernelClass c, OpKind k) {
  switch (c) {
    case KernelClass::all_gather: return k == OpKind::all_gather;
    case KernelClass::reduce_scatter: return k == OpKind::reduce_scatter;
    case KernelClass::all_reduce: return k == OpKind::all_reduce;
    case KernelClass::all_to_all:
    case KernelClass::send_recv: return k == OpKind::all_to_all || k == OpKind::send || k == OpKind::recv;
    default: return false;
  }
}

// "FSDP::pre_forward (layers.3)" -> "FSDP::pre_forward (layers.*)": one line per hook, not per module.
std::string fold_framework(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    out += name[i];
    if (name[i] == '.' && i + 1 < name.size() && std::isdigit(static_cast<unsigned char>(name[i + 1]))) {
      while (i + 1 < name.size() && std::isdigit(static_cast<unsigned char>(name[i + 1]))) ++i;
      out += '*';
    }
  }
  return out;
}

struct UnmatchedAcc {
  int64_t num_kernels = 0;
  double seconds = 0;
  std::map<std::string, int64_t> classes;
};

// Who a launch call is the host's work for: an op name, a hook shared over ops of a kind, or
// nothing the scenario has (then it counts with the op before it).
enum class HostOwner : uint8_t { none, op, optimizer, dp_params, dp_grads };

struct HostLaunch {
  int window = 0;
  double ts_us = 0;
  int64_t correlation = 0;
  double wait_us = 0;  // blocked inside the call (a synchronous copy to the host)
  HostOwner owner = HostOwner::none;
  OpMeasure* op = nullptr;  // owner op
};

// The time the host waited inside the call of a copy to the host that returned only after the
// copy had ended (a synchronous copy: .item(), .tolist(), .cpu()): from the call to the copy's start.
double sync_wait_us(const TraceLaunch& l, const TraceKernel& k, std::string_view name) {
  if (k.activity != GpuActivity::memcpy || name.find("DtoH") == std::string_view::npos) return 0;
  if (l.end_us() < k.end_us()) return 0;  // returned before the copy ended: asynchronous
  return std::max(0.0, k.ts_us - l.ts_us);
}

}  // namespace

TraceMatch match_trace(const KinetoTrace& t, const StepGraph& g) {
  TraceMatch m;
  m.trace_file = t.file;
  m.rank = t.rank;
  if (t.rank >= g.plan.num_ranks()) {
    throw InputError(t.file, "/distributedInfo/rank",
                     "rank " + std::to_string(t.rank) + " is not a rank of the scenario (" +
                         std::to_string(g.plan.num_ranks()) + " ranks)");
  }
  const Program& p = g.programs[static_cast<size_t>(g.plan.program_of(t.rank))];

  // The program's op names.
  std::unordered_map<std::string, std::vector<uint32_t>> by_name;
  for (uint32_t i = 0; i < p.ops.size(); ++i) by_name[p.name_of(p.ops[i])].push_back(i);
  for (const auto& [name, idx] : by_name) {
    const Op& op = p.ops[idx.front()];
    OpMeasure o;
    o.name = name;
    o.kind = op.kind;
    o.phase = op.phase;
    o.num_ops = static_cast<int64_t>(idx.size());
    m.ops.emplace(name, o);
  }

  // Step windows (host time): the profiler's steps, or the whole trace.
  struct Window {
    std::string name;
    double begin = 0, end = 0, host = 0;
  };
  std::vector<Window> windows;
  for (const TraceRange& s : t.steps) windows.push_back({t.name_of(s), s.ts_us, s.end_us(), s.dur_us});
  if (windows.empty()) {
    double b = t.kernels.front().ts_us, e = b;
    for (const TraceKernel& k : t.kernels) e = std::max(e, k.end_us());
    for (const TraceLaunch& l : t.launches) b = std::min(b, l.ts_us);
    windows.push_back({"whole trace", b, e, e - b});
    m.warnings.push_back("no ProfilerStep ranges (torch.profiler's schedule and prof.step()): the whole trace is one step");
  }
  auto window_of = [&](double ts) -> int {
    for (size_t i = 0; i < windows.size(); ++i) {
      if (ts >= windows[i].begin && ts <= windows[i].end) return static_cast<int>(i);
    }
    return -1;
  };

  // The innermost range around each launch, thread by thread (ranges of a thread nest).
  std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> thread_ranges, thread_launches;
  for (uint32_t i = 0; i < t.ranges.size(); ++i) thread_ranges[{t.ranges[i].pid, t.ranges[i].tid}].push_back(i);
  for (uint32_t i = 0; i < t.launches.size(); ++i) thread_launches[{t.launches[i].pid, t.launches[i].tid}].push_back(i);
  std::unordered_map<int64_t, std::pair<uint32_t, int64_t>> launch_of;  // correlation -> (launch, innermost range or -1)
  for (auto& [thread, launches] : thread_launches) {
    std::vector<uint32_t>& ranges = thread_ranges[thread];
    std::sort(ranges.begin(), ranges.end(), [&](uint32_t a, uint32_t b) {
      const TraceRange &x = t.ranges[a], &y = t.ranges[b];
      return x.ts_us != y.ts_us ? x.ts_us < y.ts_us : x.dur_us != y.dur_us ? x.dur_us > y.dur_us : a < b;
    });
    std::sort(launches.begin(), launches.end(), [&](uint32_t a, uint32_t b) {
      return t.launches[a].ts_us != t.launches[b].ts_us ? t.launches[a].ts_us < t.launches[b].ts_us : a < b;
    });
    std::vector<uint32_t> open;
    size_t next = 0;
    for (uint32_t li : launches) {
      const double ts = t.launches[li].ts_us;
      while (next < ranges.size() && t.ranges[ranges[next]].ts_us <= ts) {
        const double start = t.ranges[ranges[next]].ts_us;
        while (!open.empty() && t.ranges[open.back()].end_us() < start) open.pop_back();
        open.push_back(ranges[next++]);
      }
      while (!open.empty() && t.ranges[open.back()].end_us() < ts) open.pop_back();
      launch_of[t.launches[li].correlation] = {li, open.empty() ? -1 : static_cast<int64_t>(open.back())};
    }
  }

  // Communication ops of the program with more than one member, in issue order.
  std::vector<uint32_t> comm_ops;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (is_communication(p.ops[i].kind) && g.plan.group_size(p.ops[i].group) > 1) comm_ops.push_back(i);
  }

  std::map<std::string, UnmatchedAcc> unmatched;
  auto unmatched_add = [&](const std::string& what, KernelClass c, double dur_s) {
    UnmatchedAcc& u = unmatched[what];
    ++u.num_kernels;
    u.seconds += dur_s;
    ++u.classes[std::string(kernel_class_name(c))];
  };
  double optimizer_seconds = 0;
  int64_t optimizer_kernels = 0;
  // FSDP2's hooks, by side: 0 the parameters' (unshard), 1 the gradients' (post-backward).
  std::array<double, 2> dp_seconds{};
  std::array<int64_t, 2> dp_kernels{};
  std::array<std::map<std::string, int64_t>, 2> dp_ranges;  // folded range name -> kernels, for the report
  std::vector<std::vector<std::pair<double, double>>> intervals(windows.size());
  std::vector<std::pair<double, double>> launch_span(windows.size(), {0, -1});  // (first, last) launch
  std::vector<std::vector<uint32_t>> comm_kernels(windows.size());
  bool size_warned = false;
  int64_t outside_steps = 0;
  std::vector<HostLaunch> host;
  std::unordered_map<uint32_t, size_t> comm_host;  // communication kernel -> its entry in `host`

  for (uint32_t ki = 0; ki < t.kernels.size(); ++ki) {
    const TraceKernel& k = t.kernels[ki];
    auto found = launch_of.find(k.correlation);
    const bool launched = k.correlation >= 0 && found != launch_of.end();
    const int w = window_of(launched ? t.launches[found->second.first].ts_us : k.ts_us);
    if (w < 0) {  // outside the profiled steps (the profiler's warm-up tail, start-up)
      ++outside_steps;
      continue;
    }
    ++m.num_kernels;
    if (launched) {
      const TraceLaunch& l = t.launches[found->second.first];
      const double ts = l.ts_us;
      auto& [first, last] = launch_span[static_cast<size_t>(w)];
      if (last < first) first = last = ts;
      first = std::min(first, ts);
      last = std::max(last, ts);
      host.push_back({w, ts, l.correlation, sync_wait_us(l, k, t.name_of(k)), HostOwner::none, nullptr});
    }
    const double dur = k.dur_us * kUs;
    m.kernel_seconds += dur;
    intervals[static_cast<size_t>(w)].emplace_back(k.ts_us, k.end_us());
    const KernelClass c = classify_kernel(t.name_of(k), k.activity);
    if (is_comm(c)) {
      comm_kernels[static_cast<size_t>(w)].push_back(ki);
      if (launched) comm_host[ki] = host.size() - 1;
      continue;
    }
    if (!launched) {
      unmatched_add("no launch record (correlation id not in the trace)", c, dur);
      continue;
    }
    const int64_t ri = found->second.second;
    if (ri < 0) {
      unmatched_add("outside every range", c, dur);
      continue;
    }
    const std::string& range = t.name_of(t.ranges[static_cast<size_t>(ri)]);
    if (auto op = m.ops.find(range); op != m.ops.end()) {
      op->second.seconds += dur;
      ++op->second.num_kernels;
      m.matched_seconds += dur;
      ++m.num_matched_kernels;
      host.back().owner = HostOwner::op;
      host.back().op = &op->second;
      continue;
    }
    switch (range_meaning(range)) {
      case RangeMeaning::optimizer:
        optimizer_seconds += dur;
        ++optimizer_kernels;
        host.back().owner = HostOwner::optimizer;
        break;
      case RangeMeaning::data_parallel: {
        const size_t side = range.starts_with("FSDP::post_backward") ? 1 : 0;
        dp_seconds[side] += dur;
        ++dp_kernels[side];
        ++dp_ranges[side][fold_framework(range)];
        host.back().owner = side == 0 ? HostOwner::dp_params : HostOwner::dp_grads;
        break;
      }
      case RangeMeaning::framework: unmatched_add("framework " + fold_framework(range), c, dur); break;
      case RangeMeaning::step: unmatched_add("in no range but the profiler step", c, dur); break;
      case RangeMeaning::unknown:
      case RangeMeaning::op: unmatched_add("range " + fold_layer(range) + " (no op of the scenario)", c, dur); break;
    }
  }

  if (outside_steps > 0) {
    m.warnings.push_back(std::to_string(outside_steps) + " GPU activities outside the profiled steps were left out");
  }

  // Collectives: the kernels of each step against the program's collectives, kind by kind in order.
  for (size_t w = 0; w < windows.size(); ++w) {
    std::vector<bool> used(comm_ops.size(), false);
    for (uint32_t ki : comm_kernels[w]) {
      const TraceKernel& k = t.kernels[ki];
      const KernelClass c = classify_kernel(t.name_of(k), k.activity);
      const double dur = k.dur_us * kUs;
      size_t j = 0;
      while (j < comm_ops.size() && (used[j] || !comm_matches(c, p.ops[comm_ops[j]].kind))) ++j;
      if (j == comm_ops.size()) {
        unmatched_add(std::string(kernel_class_name(c)) + " kernels beyond the scenario's collectives", c, dur);
        continue;
      }
      // A kernel whose recorded size is off by more than 2x from the next collective of its kind is
      // not that collective (the token counts an expert dispatch exchanges before the tokens).
      if (k.comm >= 0) {
        const CommArgs& a = t.comm_args[static_cast<size_t>(k.comm)];
        const double elements = p.ops[comm_ops[j]].kind == OpKind::all_gather ? a.out_elements : a.in_elements;
        const double bytes = elements * a.element_bytes, want = p.ops[comm_ops[j]].comm_bytes;
        if (bytes > 0 && want > 0 && (bytes > 2 * want || 2 * bytes < want)) {
          unmatched_add(std::string(kernel_class_name(c)) + " kernels of no collective of the scenario (size)", c, dur);
          continue;
        }
      }
      used[j] = true;
      const Op& op = p.ops[comm_ops[j]];
      OpMeasure& o = m.ops.at(p.name_of(op));
      if (auto h = comm_host.find(ki); h != comm_host.end()) {
        host[h->second].owner = HostOwner::op;
        host[h->second].op = &o;
      }
      o.seconds += dur;
      ++o.num_kernels;
      o.ranges_per_step += 1;  // a collective's "range" is its kernel
      m.matched_seconds += dur;
      ++m.num_matched_kernels;
      if (k.comm >= 0 && !size_warned) {
        const CommArgs& a = t.comm_args[static_cast<size_t>(k.comm)];
        const double elements = op.kind == OpKind::all_gather ? a.out_elements : a.in_elements;
        const double bytes = elements * a.element_bytes;
        if (bytes > 0 && std::fabs(bytes - op.comm_bytes) > 0.01 * op.comm_bytes) {
          m.warnings.push_back("collective " + fold_layer(p.name_of(op)) + ": the trace's kernel moves " +
                               std::to_string(static_cast<int64_t>(bytes)) + " bytes, the scenario's op " +
                               std::to_string(static_cast<int64_t>(op.comm_bytes)) +
                               " (is the scenario the traced job's plan?)");
          size_warned = true;
        }
      }
    }
    const auto missing = std::count(used.begin(), used.end(), false);
    if (missing > 0 && w == 0) {
      m.warnings.push_back(std::to_string(missing) + " of the scenario's " + std::to_string(comm_ops.size()) +
                           " collectives over more than one rank had no kernel in the step");
    }
  }

  // The optimizer's kernels, shared over its ops by the bytes they move.
  double optimizer_bytes = 0;
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::optimizer) optimizer_bytes += op.bytes_read + op.bytes_written;
  }
  if (optimizer_kernels > 0 && optimizer_bytes > 0) {
    for (auto& [name, o] : m.ops) {
      if (o.kind != OpKind::optimizer) continue;
      double bytes = 0;
      for (uint32_t i : by_name.at(name)) bytes += p.ops[i].bytes_read + p.ops[i].bytes_written;
      o.seconds += optimizer_seconds * bytes / optimizer_bytes;
      o.num_kernels += optimizer_kernels;  // every one of them updates this op's weights too
      o.ranges_per_step = static_cast<double>(o.num_ops) * static_cast<double>(windows.size());
    }
    m.matched_seconds += optimizer_seconds;
    m.num_matched_kernels += optimizer_kernels;
  } else if (optimizer_kernels > 0) {
    UnmatchedAcc& u = unmatched["optimizer range (the scenario has no optimizer op)"];
    u.num_kernels += optimizer_kernels;
    u.seconds += optimizer_seconds;
    u.classes["other"] += optimizer_kernels;
  }

  // FSDP2's hooks, shared over the program's copies of their side (dp_copies.hpp) by the bytes
  // each moves: a hook runs several kernels for several ops (a cast and a copy per parameter, the
  // reduce-scatter's copy-in and the accumulation), not one range per op.
  auto dp_side = [](const std::string& name, OpKind kind) -> int {
    if (kind != OpKind::dp_copy && kind != OpKind::grad_accumulate) return -1;
    return name.find(".fsdp_copy_") != std::string::npos ? 0 : 1;
  };
  for (size_t side = 0; side < 2; ++side) {
    if (dp_kernels[side] == 0) continue;
    double total = 0;
    for (const auto& [name, o] : m.ops) {
      if (dp_side(name, o.kind) != static_cast<int>(side)) continue;
      for (uint32_t i : by_name.at(name)) total += p.ops[i].bytes_read + p.ops[i].bytes_written;
    }
    if (total <= 0) {
      for (const auto& [range, kernels] : dp_ranges[side]) {
        UnmatchedAcc& u = unmatched["framework " + range + " (the scenario has no FSDP2 copy)"];
        u.num_kernels += kernels;
        u.classes["copy"] += kernels;
      }
      // Their time, shared over the lines by kernels (the report's unit is the line).
      for (const auto& [range, kernels] : dp_ranges[side]) {
        unmatched["framework " + range + " (the scenario has no FSDP2 copy)"].seconds +=
            dp_seconds[side] * static_cast<double>(kernels) / static_cast<double>(dp_kernels[side]);
      }
      continue;
    }
    for (auto& [name, o] : m.ops) {
      if (dp_side(name, o.kind) != static_cast<int>(side)) continue;
      double bytes = 0;
      for (uint32_t i : by_name.at(name)) bytes += p.ops[i].bytes_read + p.ops[i].bytes_written;
      o.seconds += dp_seconds[side] * bytes / total;
      o.num_kernels += dp_kernels[side];
      o.ranges_per_step = static_cast<double>(o.num_ops) * static_cast<double>(windows.size());
    }
    m.matched_seconds += dp_seconds[side];
    m.num_matched_kernels += dp_kernels[side];
  }

  // The host's time: from each launch of a step to the next, the op of the launch (or the op
  // before it) less a synchronous copy's wait; a hook's time shared equally over the ops of its
  // pool (an optimizer step updates every unit, an FSDP2 hook copies for several ops).
  {
    std::array<std::vector<OpMeasure*>, 3> pool;  // optimizer, dp_params, dp_grads
    std::array<double, 3> pool_ops{};
    for (auto& [name, o] : m.ops) {
      const int side = dp_side(name, o.kind);
      const int k = o.kind == OpKind::optimizer ? 0 : side >= 0 ? 1 + side : -1;
      if (k < 0) continue;
      pool[static_cast<size_t>(k)].push_back(&o);
      pool_ops[static_cast<size_t>(k)] += static_cast<double>(o.num_ops);
    }
    auto pool_of = [](HostOwner h) { return h == HostOwner::optimizer ? 0 : h == HostOwner::dp_params ? 1 : 2; };
    for (HostLaunch& l : host) {  // a hook the scenario has no op for is no owner
      if (l.owner != HostOwner::none && l.owner != HostOwner::op && pool_ops[static_cast<size_t>(pool_of(l.owner))] == 0) {
        l.owner = HostOwner::none;
      }
    }
    std::sort(host.begin(), host.end(), [](const HostLaunch& a, const HostLaunch& b) {
      return std::tie(a.window, a.ts_us, a.correlation) < std::tie(b.window, b.ts_us, b.correlation);
    });
    std::array<double, 3> pool_host{};
    const HostLaunch* owner = nullptr;  // the launch whose op the host is working on
    for (size_t i = 0; i < host.size(); ++i) {
      const HostLaunch& l = host[i];
      if (i == 0 || l.window != host[i - 1].window) owner = nullptr;  // a new step
      if (l.owner != HostOwner::none) owner = &l;
      m.host_blocked_s += l.wait_us * kUs;
      if (i + 1 == host.size() || host[i + 1].window != l.window || owner == nullptr) continue;
      const double busy = std::max(0.0, host[i + 1].ts_us - l.ts_us - l.wait_us) * kUs;
      if (owner->owner == HostOwner::op) {
        owner->op->host_s += busy;
      } else {
        pool_host[static_cast<size_t>(pool_of(owner->owner))] += busy;
      }
      m.host_s += busy;
    }
    for (size_t k = 0; k < pool.size(); ++k) {
      for (OpMeasure* o : pool[k]) o->host_s += pool_host[k] * static_cast<double>(o->num_ops) / pool_ops[k];
    }
    m.launches_per_step = static_cast<double>(host.size());
  }

  // Ranges per step of each op name.
  for (const TraceRange& r : t.ranges) {
    auto op = m.ops.find(t.name_of(r));
    if (op != m.ops.end() && !is_communication(op->second.kind) && window_of(r.ts_us) >= 0) op->second.ranges_per_step += 1;
  }

  // Steps.
  const double n = static_cast<double>(windows.size());
  for (size_t w = 0; w < windows.size(); ++w) {
    StepMeasure s;
    s.name = windows[w].name;
    s.host_s = windows[w].host * kUs;
    s.launch_span_s = std::max(0.0, launch_span[w].second - launch_span[w].first) * kUs;
    auto& iv = intervals[w];
    s.num_kernels = static_cast<int64_t>(iv.size());
    if (!iv.empty()) {
      std::sort(iv.begin(), iv.end());
      double lo = iv.front().first, hi = iv.front().second, busy = 0, last_end = lo;
      for (const auto& [a, b] : iv) {
        if (a > hi) {
          busy += hi - lo;
          lo = a;
          hi = b;
        } else {
          hi = std::max(hi, b);
        }
        last_end = std::max(last_end, b);
      }
      busy += hi - lo;
      s.gpu_span_s = (last_end - iv.front().first) * kUs;
      s.gpu_busy_s = busy * kUs;
    }
    m.steps.push_back(s);
  }
  std::map<std::string, std::string> count_warnings;  // by folded name: one line per op family of layers
  m.host_s /= n;
  m.host_blocked_s /= n;
  m.launches_per_step /= n;
  for (auto& [name, o] : m.ops) {
    o.seconds /= n;
    o.host_s /= n;
    o.ranges_per_step /= n;
    if (o.num_kernels > 0 && !is_communication(o.kind) && o.kind != OpKind::optimizer &&
        std::fabs(o.ranges_per_step - static_cast<double>(o.num_ops)) > 1e-9) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", o.ranges_per_step);
      count_warnings.try_emplace(fold_layer(name), "op " + fold_layer(name) + ": " + buf + " ranges per step, " +
                                                       std::to_string(o.num_ops) +
                                                       " ops in the scenario (micro-batches or recompute differ?)");
    }
  }
  for (auto& [folded, w] : count_warnings) m.warnings.push_back(w);
  m.kernel_seconds /= n;
  m.matched_seconds /= n;
  for (auto& [what, u] : unmatched) {
    Unmatched x;
    x.what = what;
    x.num_kernels = u.num_kernels;
    x.seconds = u.seconds / n;
    x.kernel_class = std::max_element(u.classes.begin(), u.classes.end(), [](const auto& a, const auto& b) {
                       return a.second < b.second;
                     })->first;
    m.unmatched.push_back(x);
  }
  std::sort(m.unmatched.begin(), m.unmatched.end(), [](const Unmatched& a, const Unmatched& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.what < b.what;
  });

  // The allocator's peak during the steps, and its state when they began.
  for (const AllocatorSample& s : t.memory) {
    if (s.ts_us < windows.front().begin || s.ts_us > windows.back().end) continue;
    if (m.start_allocated_bytes < 0 && s.bytes) m.start_allocated_bytes = std::max(0.0, s.allocated_bytes - *s.bytes);
    m.peak_allocated_bytes = std::max(m.peak_allocated_bytes, s.allocated_bytes);
    m.peak_reserved_bytes = std::max(m.peak_reserved_bytes, s.reserved_bytes);
  }
  return m;
}

}  // namespace moesim
