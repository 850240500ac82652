// SPDX-License-Identifier: MIT
#include "search/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "core/error.hpp"
#include "core/units.hpp"
#include "cost/cost_model.hpp"
#include "engine/engine.hpp"
#include "engine/power_runs.hpp"
#include "graph/graph_stats.hpp"
#include "graph/step_graph.hpp"
#include "report/step_report.hpp"
#include "scenario/device_spread.hpp"
#include "search/memory_bound.hpp"

namespace moesim {

bool cannot_fit(double bound_bytes, double hbm_capacity_bytes) {
  return bound_bytes * (1.0 - 1e-9) > hbm_capacity_bytes;
}

namespace {

// Every routing field: two specs with the same key draw the same loads.
std::string routing_key(const RoutingSpec& r) {
  return std::string(enum_name(r.distribution)) + "|" + std::to_string(r.skew) + "|" + r.histogram + "|" +
         std::to_string(r.seed) + "|" + std::to_string(r.num_sampled_steps) + "|" + std::to_string(r.groups) + "|" +
         std::to_string(r.groups_per_token) + "|" + std::to_string(r.nodes_per_token) + "|" +
         std::to_string(r.devices_per_token) + "|" +
         (r.capacity_factor ? std::to_string(*r.capacity_factor) : std::string("dropless")) + "|" +
         std::string(enum_name(r.capacity_policy)) + "|" + std::to_string(r.bias_update_speed) + "|" +
         std::to_string(r.bias_start_step);
}

// Samplers a sweep keeps (each holds its per-layer expert tables: a few MB for K3's 896 experts).
constexpr size_t kMaxCachedSamplers = 8;

std::string gigabytes(double bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

}  // namespace

// Members are declared in the order they depend on one another: the engine borrows the graph
// and the cost model, so it goes first when they change.
struct ConfigEvaluator::State {
  std::string hardware_file;
  std::unique_ptr<CostModel> cost;
  std::string structure_key;
  std::string routing;
  std::unique_ptr<StepGraph> graph;
  // Routing samplers by everything that sets their draws (the routing, the experts, the EP
  // layout): configurations of other structures with the same routing and EP layout reuse one,
  // with the per-layer expert tables it built on first use.
  std::map<std::string, std::unique_ptr<RoutingSampler>> samplers;
  const RoutingSampler* sampler = nullptr;  // the configuration's; null without experts
  GraphStats stats;
  std::unique_ptr<Engine> engine;
};

ConfigEvaluator::ConfigEvaluator(const SweepSpace& space, bool distinct_ranks)
    : space_(space), distinct_ranks_(distinct_ranks), state_(std::make_unique<State>()) {}

ConfigEvaluator::~ConfigEvaluator() = default;

ConfigOutcome ConfigEvaluator::evaluate(int64_t index) { return evaluate(index, space_.load(index)); }

ConfigOutcome ConfigEvaluator::evaluate(int64_t index, const LoadedConfig& loaded) {
  ConfigOutcome out;
  out.index = index;
  if (!loaded.scenario) {
    out.status = ConfigStatus::rejected;
    out.reason_path = loaded.reason_path;
    out.reason = loaded.reason;
    return out;
  }
  const Scenario& s = *loaded.scenario;
  const double capacity = s.hardware.device.hbm_capacity.value;
  out.memory_bound_bytes = persistent_lower_bound_bytes(s);
  if (cannot_fit(out.memory_bound_bytes, capacity)) {
    out.status = ConfigStatus::pruned;
    out.reason = "persistent state alone is at least " + gigabytes(out.memory_bound_bytes) + " per device, over the " +
                 gigabytes(capacity) + " of HBM";
    return out;
  }
  out.status = ConfigStatus::simulated;
  const StepReport r = simulate(s, loaded);
  out.step_time_s = r.step_time_s;
  out.step_time_p99_s = r.step_time_p99_s;
  out.tokens_per_s = r.tokens_per_s;
  out.mfu = r.mfu;
  out.peak_hbm_bytes = r.peak_hbm_bytes;
  out.peak_ddr_bytes = r.peak_ddr_bytes;
  out.compute_s = r.compute_stream_s;
  out.exposed_comm_s = r.exposed_comm_s;
  out.bubble_s = r.bubble_s;
  out.num_devices = r.num_devices;
  out.fits = r.fits;
  return out;
}

StepReport ConfigEvaluator::simulate(const Scenario& s, const LoadedConfig& loaded) {
  State& st = *state_;
  if (!st.cost || st.hardware_file != s.hardware_file) {
    st.engine.reset();
    st.cost = std::make_unique<CostModel>(s.hardware);
    st.hardware_file = s.hardware_file;
  }
  const std::string routing = routing_key(s.spec.routing);
  const bool new_graph = !st.graph || st.structure_key != loaded.structure_key;
  if (new_graph) {
    st.engine.reset();
    st.graph = std::make_unique<StepGraph>(build_step_graph(s));
    st.structure_key = loaded.structure_key;
    ++num_graphs_built_;
  }
  if (new_graph || st.routing != routing) {
    // The engine draws from the sampler of this routing and EP layout, the same draws as the
    // graph's own sampler would give; the graph stays when only the routing changed.
    st.sampler = nullptr;
    if (s.model.moe) {
      const int64_t per_node = routing_ranks_per_node(s, st.graph->plan);
      const std::string key = routing + "|" + std::to_string(s.model.moe->num_experts) + "|" +
                              std::to_string(s.model.moe->top_k) + "|" + std::to_string(s.spec.parallel.ep) + "|" +
                              std::to_string(per_node);
      auto it = st.samplers.find(key);
      if (it == st.samplers.end()) {
        if (st.samplers.size() >= kMaxCachedSamplers) st.samplers.clear();  // a routing-heavy sweep: bounded memory
        it = st.samplers.emplace(key, std::make_unique<RoutingSampler>(s.spec.routing, s.model.moe->num_experts,
                                                                      s.model.moe->top_k, s.spec.parallel.ep,
                                                                      s.routing_histogram, per_node))
                 .first;
        ++num_samplers_built_;
      }
      st.sampler = it->second.get();
    }
    st.routing = routing;
    st.stats = compute_stats(*st.graph, st.sampler);
  }
  if (!st.engine) st.engine = std::make_unique<Engine>(*st.graph, *st.cost);

  EngineOptions eo;
  eo.distinct_ranks = distinct_ranks_;
  eo.routing = st.sampler;
  eo.rank_speed = rank_speeds(s.spec);  // the scenario's stragglers
  eo.rank_compute_slowdown = rank_compute_slowdowns(s);  // the hardware's slowest part
  auto run_steps = [&](Engine& engine) {
    std::vector<StepResult> steps;
    for (int64_t step = 0; step < s.spec.routing.num_sampled_steps; ++step) {
      eo.step = step;
      steps.push_back(engine.run(eo));
    }
    return steps;
  };
  // The cached engine runs at the file's fixed power state (every step of a file without a power
  // model); a solved state (power_runs.hpp) runs on an engine of its own cost model.
  const PoweredSteps powered = simulate_in_power_state(*st.cost, [&](const CostModel& cost) {
    if (!cost.power_state().solved) return run_steps(*st.engine);
    Engine engine(*st.graph, cost);
    return run_steps(engine);
  }, st.graph.get());
  StepReport report = make_step_report(s, *st.graph, st.stats, powered.results, 0.0);
  if (s.hardware.device.power) {
    report.power = powered.state;
    report.power_runs = powered.runs;
  }
  return report;
}

StepReport ConfigEvaluator::explain(int64_t index) {
  const LoadedConfig loaded = space_.load(index);
  if (!loaded.scenario) throw InputError("--explain", "", "configuration " + std::to_string(index) + ": " + loaded.reason);
  return simulate(*loaded.scenario, loaded);
}

void SweepSummary::add(const ConfigOutcome& o) {
  ++num_configs_total;
  switch (o.status) {
    case ConfigStatus::rejected:
      ++num_configs_rejected;
      // The first max_listed, and the first of every reason path after them, so each reason has
      // an example however the configurations are ordered.
      if (++rejected_by_path[o.reason_path.empty() ? "/" : o.reason_path] == 1 ||
          static_cast<int64_t>(rejected.size()) < max_listed_) {
        rejected.push_back(o);
      }
      return;
    case ConfigStatus::pruned:
      ++num_configs_pruned;
      if (static_cast<int64_t>(pruned.size()) < max_listed_) pruned.push_back(o);
      return;
    case ConfigStatus::simulated:
      break;
  }
  ++num_configs_simulated;
  RankedPoint p;
  p.index = o.index;
  p.step_time_s = o.step_time_s;
  p.peak_hbm_bytes = o.peak_hbm_bytes;
  p.fits = o.fits;
  p.step_time_p99_s = o.step_time_p99_s;
  p.tokens_per_s = o.tokens_per_s;
  p.mfu = o.mfu;
  p.peak_ddr_bytes = o.peak_ddr_bytes;
  p.memory_bound_bytes = o.memory_bound_bytes;
  p.compute_s = o.compute_s;
  p.exposed_comm_s = o.exposed_comm_s;
  p.bubble_s = o.bubble_s;
  p.num_devices = o.num_devices;
  top_.add(p);
  if (o.fits) {
    ++num_configs_fit;
    pareto_.add(p);
  }
}

// ---- running ------------------------------------------------------------------------------------

namespace {

bool stopped(const SweepRunOptions& opt) { return opt.stop != nullptr && opt.stop->load(std::memory_order_relaxed); }

// Evaluates the configurations of `blocks` (block numbers), one thread per evaluator pulling
// blocks from a shared counter; outcomes in block order. `done_before` and `scale` turn this
// process's progress into an estimate for the whole sweep. After a stop, the outcomes are cut to
// the longest prefix that finished.
std::vector<ConfigOutcome> evaluate_blocks(const SweepSpace& space,
                                           std::vector<std::unique_ptr<ConfigEvaluator>>& evaluators,
                                           const std::vector<int64_t>& blocks, const SweepRunOptions& opt,
                                           int64_t done_before, int64_t scale) {
  const int64_t block = space.block_size();
  std::vector<ConfigOutcome> out(blocks.size() * static_cast<size_t>(block));
  std::vector<uint8_t> finished(out.size(), 0);  // each written by the one thread that evaluates it
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](ConfigEvaluator& ev) {
    try {
      for (size_t b = next++; b < blocks.size() && !failed; b = next++) {
        for (int64_t i = 0; i < block; ++i) {
          if (stopped(opt)) return;
          const size_t k = b * static_cast<size_t>(block) + static_cast<size_t>(i);
          out[k] = ev.evaluate(blocks[b] * block + i);
          finished[k] = 1;
          ++done;
        }
      }
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  const size_t num_threads = std::min(evaluators.size(), std::max<size_t>(blocks.size(), 1));
  std::vector<std::thread> threads;
  if (opt.progress) {
    // Every evaluator on its own thread; the calling thread draws progress until they finish.
    for (size_t t = 0; t < num_threads; ++t) threads.emplace_back(work, std::ref(*evaluators[t]));
    const int64_t total = space.num_configs();
    while (done < static_cast<int64_t>(out.size()) && !failed && !stopped(opt)) {
      opt.progress(std::min(total, done_before + done * scale), total);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  } else {
    for (size_t t = 1; t < num_threads; ++t) threads.emplace_back(work, std::ref(*evaluators[t]));
    work(*evaluators[0]);
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  if (stopped(opt)) out.resize(static_cast<size_t>(std::find(finished.begin(), finished.end(), 0) - finished.begin()));
  return out;
}

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put(out, static_cast<uint64_t>(s.size()));
  out += s;
}

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  bool done() const { return pos_ == bytes_.size(); }
  template <class T>
  T get() {
    T v;
    need(sizeof v);
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const auto n = static_cast<size_t>(get<uint64_t>());
    need(n);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  void need(size_t n) const {
    if (bytes_.size() - pos_ < n) throw std::runtime_error("decode_outcomes: truncated data");
  }
  const std::string& bytes_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode_outcomes(const std::vector<ConfigOutcome>& outcomes) {
  std::string out;
  for (const ConfigOutcome& o : outcomes) {
    put(out, o.index);
    put(out, static_cast<uint8_t>(o.status));
    put_string(out, o.reason_path);
    put_string(out, o.reason);
    for (double v : {o.memory_bound_bytes, o.step_time_s, o.step_time_p99_s, o.tokens_per_s, o.mfu, o.peak_hbm_bytes,
                     o.peak_ddr_bytes, o.compute_s, o.exposed_comm_s, o.bubble_s}) {
      put(out, v);
    }
    put(out, o.num_devices);
    put(out, static_cast<uint8_t>(o.fits));
  }
  return out;
}

std::vector<ConfigOutcome> decode_outcomes(const std::string& bytes) {
  std::vector<ConfigOutcome> out;
  Reader r(bytes);
  while (!r.done()) {
    ConfigOutcome o;
    o.index = r.get<int64_t>();
    o.status = static_cast<ConfigStatus>(r.get<uint8_t>());
    o.reason_path = r.get_string();
    o.reason = r.get_string();
    for (double* v : {&o.memory_bound_bytes, &o.step_time_s, &o.step_time_p99_s, &o.tokens_per_s, &o.mfu,
                      &o.peak_hbm_bytes, &o.peak_ddr_bytes, &o.compute_s, &o.exposed_comm_s, &o.bubble_s}) {
      *v = r.get<double>();
    }
    o.num_devices = r.get<int64_t>();
    o.fits = r.get<uint8_t>() != 0;
    out.push_back(std::move(o));
  }
  return out;
}

int64_t run_sweep(const SweepSpace& space, const SweepRunOptions& opt, Distributed& dist) {
  if (opt.stop != nullptr && dist.size() > 1) throw std::logic_error("run_sweep: a stop flag needs a single process");
  const int64_t block = space.block_size();
  const int64_t num_blocks = space.num_configs() / block;
  const int64_t threads = std::max<int64_t>(opt.threads, 1);
  const int64_t ranks = dist.size();
  // Blocks per process per round: enough for every thread to stay busy, few enough that a
  // round's outcomes stay small.
  const int64_t per_rank = std::max<int64_t>(8 * threads, (512 + block - 1) / block);
  const int64_t per_round = per_rank * ranks;
  std::vector<std::unique_ptr<ConfigEvaluator>> evaluators;
  for (int64_t t = 0; t < threads; ++t)
    evaluators.push_back(std::make_unique<ConfigEvaluator>(space, opt.distinct_ranks));

  for (int64_t first = 0; first < num_blocks; first += per_round) {
    const int64_t last = std::min(num_blocks, first + per_round);
    std::vector<int64_t> mine;
    for (int64_t b = first + dist.rank(); b < last; b += ranks) mine.push_back(b);
    SweepRunOptions local = opt;
    if (dist.rank() != 0) local.progress = nullptr;
    std::vector<ConfigOutcome> outcomes = evaluate_blocks(space, evaluators, mine, local, first * block, ranks);
    std::vector<ConfigOutcome> all;
    if (ranks == 1) {
      all = std::move(outcomes);
    } else {
      const std::vector<std::string> gathered = dist.gather(encode_outcomes(outcomes));
      if (dist.rank() != 0) continue;
      for (const std::string& bytes : gathered) {
        for (auto& o : decode_outcomes(bytes)) all.push_back(std::move(o));
      }
    }
    std::sort(all.begin(), all.end(), [](const ConfigOutcome& a, const ConfigOutcome& b) { return a.index < b.index; });
    if (opt.consume) {
      for (const ConfigOutcome& o : all) opt.consume(o);
    }
    if (stopped(opt)) return first * block + static_cast<int64_t>(all.size());
    if (opt.progress) opt.progress(last * block, space.num_configs());
  }
  return space.num_configs();
}

}  // namespace moesim
