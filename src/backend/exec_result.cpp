// SPDX-License-Identifier: MIT
#include "backend/exec_result.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <type_traits>

namespace moesim::cuda {
namespace {

// Fixed-width fields in the host's byte order: the bytes only travel between the processes of one
// job, which run the same binary.
class Writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    out_ += s;
  }
  void put(const std::vector<Picoseconds>& v) {
    put(static_cast<uint64_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(Picoseconds));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  void get(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::memcpy(&v, take(sizeof v), sizeof v);
  }
  void get(std::string& s) {
    uint64_t n = 0;
    get(n);
    s.assign(take(n), n);
  }
  void get(std::vector<Picoseconds>& v) {
    uint64_t n = 0;
    get(n);
    if (n > (in_.size() - at_) / sizeof(Picoseconds)) fail();
    v.resize(n);
    std::memcpy(v.data(), take(n * sizeof(Picoseconds)), n * sizeof(Picoseconds));
  }
  void finish() const {
    if (at_ != in_.size()) fail();
  }

 private:
  const char* take(uint64_t n) {
    if (n > in_.size() - at_) fail();
    const char* p = in_.data() + at_;
    at_ += n;
    return p;
  }
  [[noreturn]] static void fail() { throw std::runtime_error("decode_measurement: not a rank measurement (truncated or trailing bytes)"); }

  const std::string& in_;
  size_t at_ = 0;
};

constexpr uint32_t kMagic = 0x6d65736d;  // "mesm": a rank measurement

}  // namespace

std::string encode_measurement(const RankMeasurement& m) {
  Writer w;
  w.put(kMagic);
  w.put(m.rank);
  w.put(static_cast<uint64_t>(m.steps.size()));
  for (const MeasuredStep& s : m.steps) {
    w.put(s.op_start);
    w.put(s.op_end);
    const RankRun& r = s.run;
    w.put(r.rank);
    w.put(r.device);
    w.put(r.device_name);
    for (double v : {r.persistent_bytes, r.context_bytes, r.executor_bytes, r.slab_bytes, r.device_bytes,
                     r.program_order_peak_bytes, r.timeline_peak_bytes}) {
      w.put(v);
    }
    w.put(r.slab_waits);
    w.put(r.end);
  }
  return w.take();
}

RankMeasurement decode_measurement(const std::string& bytes) {
  Reader rd(bytes);
  uint32_t magic = 0;
  rd.get(magic);
  if (magic != kMagic) throw std::runtime_error("decode_measurement: not a rank measurement (bad magic)");
  RankMeasurement m;
  rd.get(m.rank);
  uint64_t steps = 0;
  rd.get(steps);
  if (steps > bytes.size()) throw std::runtime_error("decode_measurement: not a rank measurement (step count)");
  m.steps.resize(steps);
  for (MeasuredStep& s : m.steps) {
    rd.get(s.op_start);
    rd.get(s.op_end);
    RankRun& r = s.run;
    rd.get(r.rank);
    rd.get(r.device);
    rd.get(r.device_name);
    for (double* v : {&r.persistent_bytes, &r.context_bytes, &r.executor_bytes, &r.slab_bytes, &r.device_bytes,
                      &r.program_order_peak_bytes, &r.timeline_peak_bytes}) {
      rd.get(*v);
    }
    rd.get(r.slab_waits);
    rd.get(r.end);
  }
  rd.finish();
  return m;
}

std::vector<MemorySample> replay_memory(const Program& p, int32_t rank, double persistent_bytes,
                                        std::span<const Picoseconds> starts, std::span<const Picoseconds> ends) {
  struct Change {
    Picoseconds time;
    int order;  // frees before allocations at the same instant
    double hbm, ddr;
  };
  std::vector<Change> changes;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    for (const MemEffect& e : p.effects_of(p.ops[i])) {
      const double b = p.buffers[e.buffer].bytes;
      switch (e.action) {
        case MemAction::alloc: changes.push_back({starts[i], 1, b, 0}); break;
        case MemAction::free: changes.push_back({ends[i], 0, -b, 0}); break;
        case MemAction::to_host:
          changes.push_back({starts[i], 1, 0, b});
          changes.push_back({ends[i], 0, -b, 0});
          break;
        case MemAction::to_device:
          changes.push_back({starts[i], 1, b, 0});
          changes.push_back({ends[i], 0, 0, -b});
          break;
      }
    }
  }
  std::stable_sort(changes.begin(), changes.end(),
                   [](const Change& a, const Change& b) { return std::tie(a.time, a.order) < std::tie(b.time, b.order); });
  std::vector<MemorySample> out;
  // Reserved: a caching allocator holds at least the live peak so far (no placement is replayed).
  double hbm = persistent_bytes, ddr = 0, reserved = persistent_bytes;
  for (const Change& c : changes) {
    hbm += c.hbm;
    ddr += c.ddr;
    reserved = std::max(reserved, hbm);
    if (!out.empty() && out.back().time == c.time) {
      out.back().hbm_bytes = hbm;
      out.back().ddr_bytes = ddr;
      out.back().hbm_reserved_bytes = reserved;
    } else {
      out.push_back(MemorySample{rank, c.time, hbm, ddr, reserved});
    }
  }
  return out;
}

ExecResult assemble_result(const StepGraph& g, const std::vector<RankMeasurement>& ranks) {
  const int64_t n = g.plan.num_ranks();
  if (static_cast<int64_t>(ranks.size()) != n || ranks.empty()) {
    throw std::runtime_error("assemble_result: " + std::to_string(ranks.size()) + " rank measurement(s) for a plan of " +
                             std::to_string(n) + " rank(s)");
  }
  const size_t measured = ranks.front().steps.size();
  if (measured == 0) throw std::runtime_error("assemble_result: no measured step");
  for (int64_t r = 0; r < n; ++r) {
    const RankMeasurement& m = ranks[static_cast<size_t>(r)];
    const size_t ops = g.programs[static_cast<size_t>(g.plan.program_of(r))].ops.size();
    if (m.rank != r || m.steps.size() != measured) {
      throw std::runtime_error("assemble_result: measurement " + std::to_string(r) + " is rank " + std::to_string(m.rank) +
                               " with " + std::to_string(m.steps.size()) + " step(s), expected rank " + std::to_string(r) +
                               " with " + std::to_string(measured));
    }
    for (const MeasuredStep& s : m.steps) {
      if (s.op_start.size() != ops || s.op_end.size() != ops) {
        throw std::runtime_error("assemble_result: rank " + std::to_string(r) + " measured " + std::to_string(s.op_start.size()) +
                                 " op(s), its program has " + std::to_string(ops));
      }
    }
  }
  ExecResult res;
  for (size_t m = 0; m < measured; ++m) {
    Picoseconds worst = 0;
    for (const RankMeasurement& rm : ranks) worst = std::max(worst, rm.steps[m].run.end);
    res.step_times.push_back(worst);
  }
  std::vector<size_t> order(measured);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return res.step_times[a] < res.step_times[b]; });
  const size_t chosen = order[order.size() / 2];
  res.step_time = res.step_times[chosen];
  for (int64_t r = 0; r < n; ++r) {
    const MeasuredStep& s = ranks[static_cast<size_t>(r)].steps[chosen];
    const Program& p = g.programs[static_cast<size_t>(g.plan.program_of(r))];
    RankRun run = s.run;
    const auto samples = replay_memory(p, static_cast<int32_t>(r), run.persistent_bytes, s.op_start, s.op_end);
    run.timeline_peak_bytes = run.persistent_bytes;
    for (const MemorySample& sample : samples) run.timeline_peak_bytes = std::max(run.timeline_peak_bytes, sample.hbm_bytes);
    res.ranks.push_back(run);
    if (run.end > res.ranks[static_cast<size_t>(res.slowest_rank)].end) res.slowest_rank = static_cast<int32_t>(r);
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      res.timeline.records.push_back(
          ExecRecord{static_cast<int32_t>(r), static_cast<int32_t>(p.stage), i, p.ops[i].stream, s.op_start[i], s.op_end[i]});
    }
    res.timeline.memory.insert(res.timeline.memory.end(), samples.begin(), samples.end());
  }
  std::sort(res.timeline.records.begin(), res.timeline.records.end(), [](const ExecRecord& a, const ExecRecord& c) {
    return std::tie(a.start, a.rank, a.stream, a.op) < std::tie(c.start, c.rank, c.stream, c.op);
  });
  res.timeline.step_end = res.step_time;
  return res;
}

}  // namespace moesim::cuda
