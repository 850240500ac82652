// SPDX-License-Identifier: MIT
#include "search/capacity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace moesim {
namespace {

using Json = nlohmann::ordered_json;
using Replacements = std::vector<std::pair<std::string, std::string>>;

constexpr double kSecondsPerDay = 86400.0;

std::string str(int64_t v) { return std::to_string(v); }

bool usable(const ConfigOutcome& o) { return o.status == ConfigStatus::simulated && o.fits; }

const char* status_word(const ConfigOutcome& o) {
  switch (o.status) {
    case ConfigStatus::rejected:
      return "rejected";
    case ConfigStatus::pruned:
      return "cannot fit (bound)";
    case ConfigStatus::simulated:
      return o.fits ? "fits" : "does not fit";
  }
  return "";
}

Json outcome_json(const ConfigOutcome& o) {
  Json j;
  j["status"] = o.status == ConfigStatus::rejected ? "rejected"
                : o.status == ConfigStatus::pruned ? "pruned"
                                                   : "simulated";
  if (o.status == ConfigStatus::simulated) {
    j["step_time_s"] = o.step_time_s;
    j["tokens_per_s"] = o.tokens_per_s;
    j["mfu"] = o.mfu;
    j["peak_hbm_bytes"] = o.peak_hbm_bytes;
    j["peak_ddr_bytes"] = o.peak_ddr_bytes;
  }
  j["memory_bound_bytes"] = o.memory_bound_bytes;
  j["fits"] = o.fits;
  if (!o.reason.empty()) j["reason"] = o.reason;
  return j;
}

class DeviceSearch {
 public:
  DeviceSearch(const SweepSpace& space, const DevicePlanOptions& opt)
      : space_(space), opt_(opt), evaluator_(space, opt.distinct_ranks), base_(space.base()) {}

  DevicePlanResult run() {
    const auto& p = base_.spec.parallel;
    const auto& hw = base_.hardware;
    DevicePlanResult r;
    r.devices_per_node = hw.devices_per_node;
    r.domain_size = hw.fabric.scale_up.domain_size;
    const int64_t model_parallel = p.tp.degree * p.pp.stages * p.cp;
    const int64_t min_shard = p.ep / std::gcd(p.ep, p.cp);  // (shard x cp) % ep == 0
    r.unit = std::lcm(hw.devices_per_node, model_parallel * min_shard);
    int64_t max_devices = opt_.max_devices > 0 ? opt_.max_devices : hw.max_devices ? *hw.max_devices : 16384;
    if (hw.max_devices) max_devices = std::min(max_devices, *hw.max_devices);
    const int64_t max_k = max_devices / r.unit;
    if (max_k < 1) {
      throw InputError("--max-devices", "",
                       "no device count up to " + str(max_devices) + " is a multiple of the plan's unit (" +
                           str(r.unit) + " devices)");
    }
    // Doubling, then bisection between the last count that missed and the first that met.
    int64_t miss = 0;
    int64_t met = 0;
    for (int64_t k = 1;; k = std::min(2 * k, max_k)) {
      if (meets(r, k)) {
        met = k;
        break;
      }
      miss = k;
      if (k == max_k) break;
    }
    if (met == 0) return r;
    while (met - miss > 1) {
      const int64_t mid = miss + (met - miss) / 2;
      (meets(r, mid) ? met : miss) = mid;
    }
    for (const DeviceCountResult& c : r.counts) {
      if (c.num_devices == met * r.unit && c.best) r.answer = c.plans[*c.best];
    }
    return r;
  }

 private:
  bool meets(DevicePlanResult& r, int64_t k) {
    const int64_t n = k * r.unit;
    for (const DeviceCountResult& c : r.counts) {
      if (c.num_devices == n) return c.best && c.plans[*c.best].meets_deadline;
    }
    DeviceCountResult c = evaluate_count(n, r.domain_size);
    const bool ok = c.best && c.plans[*c.best].meets_deadline;
    r.counts.push_back(std::move(c));
    return ok;
  }

  DeviceCountResult evaluate_count(int64_t n, int64_t domain) {
    const ScenarioSpec& spec = base_.spec;
    const auto& p = spec.parallel;
    DeviceCountResult out;
    out.num_devices = n;
    const int64_t data = n / (p.tp.degree * p.pp.stages * p.cp);
    std::vector<int64_t> shards;
    for (int64_t s = 1; s <= data; ++s) {
      if (data % s != 0 || (s * p.cp) % p.ep != 0) continue;
      if (s * p.cp * p.tp.degree <= domain || s == p.fsdp.shard) shards.push_back(s);
    }
    const int64_t micro_steps = micro_batches_per_step(spec);
    for (int64_t s : shards) {
      PlanCandidate c;
      c.num_devices = n;
      c.shard = s;
      c.replicate = data / s;
      c.global_batch_size =
          opt_.fixed_batch ? spec.batch.global_batch_size : spec.batch.micro_batch_size * data * micro_steps;
      c.tokens_per_step = c.global_batch_size * spec.batch.sequence_length;
      const Replacements rep{{"/num_devices", str(n)},
                             {"/parallel/fsdp/shard", str(s)},
                             {"/parallel/fsdp/replicate", str(c.replicate)},
                             {"/batch/global_batch_size", str(c.global_batch_size)}};
      c.outcome = evaluator_.evaluate(static_cast<int64_t>(out.plans.size()), space_.load_with(rep));
      if (opt_.progress) opt_.progress(++evaluated_);
      if (usable(c.outcome)) {
        const double steps = std::ceil(opt_.tokens / static_cast<double>(c.tokens_per_step));
        c.train_s = steps * c.outcome.step_time_s;
        c.device_hours = static_cast<double>(n) * c.train_s / 3600.0;
        c.meets_deadline = c.train_s <= opt_.days * kSecondsPerDay;
        if (!out.best || c.train_s < out.plans[*out.best].train_s) out.best = out.plans.size();
      }
      out.plans.push_back(std::move(c));
    }
    return out;
  }

  const SweepSpace& space_;
  const DevicePlanOptions& opt_;
  ConfigEvaluator evaluator_;
  const Scenario& base_;
  int64_t evaluated_ = 0;
};

class FitSearch {
 public:
  FitSearch(const SweepSpace& space, const FitOptions& opt)
      : space_(space), opt_(opt), evaluator_(space, opt.distinct_ranks) {}

  FitResult run() {
    const ScenarioSpec& spec = space_.base().spec;
    const auto& p = spec.parallel;
    FitResult r;
    r.vary = opt_.vary;
    const bool seq = opt_.vary == FitVariable::sequence_length;
    if (opt_.granularity > 0) {
      r.granularity = opt_.granularity;
    } else if (seq) {
      r.granularity = std::lcm(int64_t{1024}, p.cp * (p.tp.sequence_parallel ? p.tp.degree : 1));
    } else {
      r.granularity = 1;
    }
    const int64_t max_value = opt_.max_value > 0 ? opt_.max_value : seq ? int64_t{1} << 22 : 4096;
    const int64_t max_k = max_value / r.granularity;
    if (max_k < 1) throw InputError("--max", "", "is below one step of " + str(r.granularity));
    const int64_t current = seq ? spec.batch.sequence_length : spec.batch.micro_batch_size;
    const int64_t start = std::clamp<int64_t>(current / r.granularity, 1, max_k);
    int64_t fit = 0;   // largest multiple known to fit
    int64_t miss = 0;  // smallest known not to (0: none)
    if (probe(r, start)) {
      fit = start;
      for (int64_t k = std::min(2 * start, max_k); k > fit; k = std::min(2 * k, max_k)) {
        if (!probe(r, k)) {
          miss = k;
          break;
        }
        fit = k;
      }
    } else {
      miss = start;
      for (int64_t k = start / 2; k >= 1; k /= 2) {
        if (probe(r, k)) {
          fit = k;
          break;
        }
        miss = k;
      }
    }
    if (fit > 0 && miss > 0) {
      while (miss - fit > 1) {
        const int64_t mid = fit + (miss - fit) / 2;
        (probe(r, mid) ? fit : miss) = mid;
      }
    }
    for (const FitProbe& pr : r.probes) {
      if (fit > 0 && pr.value == fit * r.granularity) r.largest_fit = pr;
      if (miss > 0 && pr.value == miss * r.granularity) r.smallest_miss = pr;
    }
    return r;
  }

 private:
  bool probe(FitResult& r, int64_t k) {
    const ScenarioSpec& spec = space_.base().spec;
    const int64_t value = k * r.granularity;
    Replacements rep;
    if (opt_.vary == FitVariable::sequence_length) {
      rep.emplace_back("/batch/sequence_length", str(value));
    } else {
      // Keep the micro-steps per optimizer step: the global batch follows the micro-batch.
      const int64_t micro_steps = micro_batches_per_step(spec);
      rep.emplace_back("/batch/micro_batch_size", str(value));
      rep.emplace_back("/batch/global_batch_size", str(value * spec.parallel.dp() * micro_steps));
    }
    FitProbe pr;
    pr.value = value;
    pr.outcome = evaluator_.evaluate(static_cast<int64_t>(r.probes.size()), space_.load_with(rep));
    pr.fits = usable(pr.outcome);
    r.probes.push_back(pr);
    if (opt_.progress) opt_.progress(static_cast<int64_t>(r.probes.size()));
    return pr.fits;
  }

  const SweepSpace& space_;
  const FitOptions& opt_;
  ConfigEvaluator evaluator_;
};

std::string fmt(const char* format, double v) {
  char text[64];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

const char* vary_name(FitVariable v) {
  return v == FitVariable::sequence_length ? "sequence_length" : "micro_batch_size";
}

// Why a plan is not the answer at its count: the checker's or the bound's reason, or the memory.
std::string why_not(const PlanCandidate& p) {
  const ConfigOutcome& o = p.outcome;
  if (o.status != ConfigStatus::simulated) return std::string(status_word(o)) + " - " + o.reason;
  return fmt("does not fit (peak HBM %.1f GB", o.peak_hbm_bytes / 1e9) + fmt(", host DDR %.1f GB)", o.peak_ddr_bytes / 1e9);
}

// How `devices` fill units of `size` (nodes, scale-up domains): how many, and how full the last.
struct Occupancy {
  int64_t count = 0;
  int64_t last = 0;  // devices used in the last unit
  int64_t size = 0;
  std::string text() const {
    return last == size ? "all full" : "the last holds " + std::to_string(last) + " of " + std::to_string(size);
  }
};
Occupancy occupancy(int64_t devices, int64_t size) {
  size = std::max<int64_t>(size, 1);
  const int64_t count = (devices + size - 1) / size;
  return {count, devices - (count - 1) * size, size};
}

// The plan with the fewest device-hours among those that meet the deadline.
const PlanCandidate* cheapest(const DevicePlanResult& r) {
  const PlanCandidate* best = nullptr;
  for (const DeviceCountResult& c : r.counts) {
    for (const PlanCandidate& p : c.plans) {
      if (p.meets_deadline && (!best || p.device_hours < best->device_hours)) best = &p;
    }
  }
  return best;
}

}  // namespace

DevicePlanResult plan_devices(const SweepSpace& space, const DevicePlanOptions& options) {
  return DeviceSearch(space, options).run();
}

FitResult plan_fit(const SweepSpace& space, const FitOptions& options) { return FitSearch(space, options).run(); }

std::string device_plan_text(const SweepSpace& space, const DevicePlanOptions& o, const DevicePlanResult& r) {
  std::ostringstream out;
  const Scenario& s = space.base();
  out << s.spec.name << ": " << s.model.name << " on " << s.hardware.name << ", " << fmt("%.4g", o.tokens)
      << " tokens in at most " << fmt("%g", o.days) << " days\n";
  out << "  device counts: multiples of " << r.unit << " (nodes of " << r.devices_per_node << ", tp x pp x cp "
      << s.spec.parallel.tp.degree * s.spec.parallel.pp.stages * s.spec.parallel.cp << ", ep " << s.spec.parallel.ep
      << "); global batch " << (o.fixed_batch ? "fixed" : "grows with data parallelism") << "\n";
  for (const DeviceCountResult& c : r.counts) {
    out << "  " << c.num_devices << " devices:";
    if (!c.best) {
      out << " no plan fits\n";
      for (const PlanCandidate& p : c.plans) out << "      shard " << p.shard << " x replicate " << p.replicate << ": " << why_not(p) << "\n";
      continue;
    }
    const PlanCandidate& b = c.plans[*c.best];
    out << " shard " << b.shard << " x replicate " << b.replicate << ", step " << fmt("%.3f s", b.outcome.step_time_s)
        << ", " << fmt("%.2f days", b.train_s / kSecondsPerDay) << (b.meets_deadline ? " (meets)" : " (too slow)")
        << ", " << fmt("%.4g device-hours", b.device_hours) << "\n";
  }
  if (!r.answer) {
    out << "no device count up to the limit meets the deadline\n";
    return out.str();
  }
  const PlanCandidate& a = *r.answer;
  const Occupancy domains = occupancy(a.num_devices, r.domain_size);
  const Occupancy nodes = occupancy(a.num_devices, r.devices_per_node);
  out << "answer: " << a.num_devices << " devices = " << domains.count << " scale-up domain(s) of " << r.domain_size
      << " (" << domains.text() << ") = " << nodes.count << " node(s) of " << r.devices_per_node << " (" << nodes.text()
      << ")\n";
  out << "  plan        fsdp shard " << a.shard << " x replicate " << a.replicate << ", tp "
      << s.spec.parallel.tp.degree << ", pp " << s.spec.parallel.pp.stages << ", cp " << s.spec.parallel.cp << ", ep "
      << s.spec.parallel.ep << "\n";
  out << "  batch       " << a.global_batch_size << " x " << s.spec.batch.sequence_length << " tokens per step";
  if (a.global_batch_size == s.spec.batch.global_batch_size) {
    out << " (as the scenario asks)\n";
  } else {
    out << "; the scenario asks " << s.spec.batch.global_batch_size
        << ": it grows with data parallelism so that every rank runs the scenario's micro-steps (--fixed-batch keeps it)\n";
  }
  out << "  step        " << fmt("%.3f s", a.outcome.step_time_s) << ", "
      << fmt("%.4g tokens/s", a.outcome.tokens_per_s) << ", MFU " << fmt("%.1f%%", 100 * a.outcome.mfu) << ", peak HBM "
      << fmt("%.1f GB", a.outcome.peak_hbm_bytes / 1e9) << "\n";
  out << "  time        " << fmt("%.2f days", a.train_s / kSecondsPerDay) << "\n";
  out << "  cost        " << fmt("%.4g device-hours", a.device_hours) << "\n";
  if (const PlanCandidate* c = cheapest(r); c && c->device_hours < a.device_hours) {
    out << "  cheapest    " << c->num_devices << " devices (shard " << c->shard << " x replicate " << c->replicate
        << "): " << fmt("%.4g device-hours", c->device_hours) << " in " << fmt("%.2f days", c->train_s / kSecondsPerDay)
        << ", also within the deadline\n";
  }
  return out.str();
}

std::string device_plan_json(const SweepSpace& space, const DevicePlanOptions& o, const DevicePlanResult& r) {
  Json j;
  const Scenario& s = space.base();
  j["scenario"] = s.spec.name;
  j["tokens"] = o.tokens;
  j["days"] = o.days;
  j["fixed_batch"] = o.fixed_batch;
  j["unit_devices"] = r.unit;
  j["devices_per_node"] = r.devices_per_node;
  j["domain_size"] = r.domain_size;
  auto plan_json = [&](const PlanCandidate& c) {
    Json p;
    p["num_devices"] = c.num_devices;
    p["num_nodes"] = c.num_devices / std::max<int64_t>(r.devices_per_node, 1);
    p["num_domains"] = (c.num_devices + r.domain_size - 1) / r.domain_size;
    p["devices_in_last_domain"] = occupancy(c.num_devices, r.domain_size).last;
    p["devices_in_last_node"] = occupancy(c.num_devices, r.devices_per_node).last;
    p["fsdp_shard"] = c.shard;
    p["fsdp_replicate"] = c.replicate;
    p["tp"] = s.spec.parallel.tp.degree;
    p["pp"] = s.spec.parallel.pp.stages;
    p["cp"] = s.spec.parallel.cp;
    p["ep"] = s.spec.parallel.ep;
    p["global_batch_size"] = c.global_batch_size;
    p["tokens_per_step"] = c.tokens_per_step;
    p["outcome"] = outcome_json(c.outcome);
    p["train_days"] = c.train_s / kSecondsPerDay;
    p["device_hours"] = c.device_hours;
    p["meets_deadline"] = c.meets_deadline;
    if (!(c.outcome.status == ConfigStatus::simulated && c.outcome.fits)) p["why_not"] = why_not(c);
    return p;
  };
  Json counts = Json::array();
  for (const DeviceCountResult& c : r.counts) {
    Json e;
    e["num_devices"] = c.num_devices;
    Json plans = Json::array();
    for (const PlanCandidate& p : c.plans) plans.push_back(plan_json(p));
    e["plans"] = plans;
    e["best"] = c.best ? Json(static_cast<int64_t>(*c.best)) : Json(nullptr);
    counts.push_back(e);
  }
  j["evaluated"] = counts;
  j["found"] = r.answer.has_value();
  j["answer"] = r.answer ? plan_json(*r.answer) : Json(nullptr);
  j["global_batch_size_asked"] = s.spec.batch.global_batch_size;
  const PlanCandidate* c = cheapest(r);
  j["cheapest"] = c ? plan_json(*c) : Json(nullptr);
  return j.dump(2) + "\n";
}

std::string fit_text(const SweepSpace& space, const FitResult& r) {
  std::ostringstream out;
  const Scenario& s = space.base();
  out << s.spec.name << ": the largest " << vary_name(r.vary) << " that fits " << s.hardware.name << " ("
      << fmt("%.0f GB HBM", s.hardware.device.hbm_capacity.value / 1e9) << ", "
      << fmt("%.0f GB host DDR", s.hardware.device.host_memory.capacity_per_device.value / 1e9)
      << " per device), in steps of " << r.granularity << "\n";
  for (const FitProbe& p : r.probes) {
    out << "  " << p.value << ": " << status_word(p.outcome);
    if (p.outcome.status == ConfigStatus::simulated) {
      const auto& dev = s.hardware.device;
      out << ", peak HBM " << fmt("%.1f GB", p.outcome.peak_hbm_bytes / 1e9)
          << (p.outcome.peak_hbm_bytes > dev.hbm_capacity.value ? " (over)" : "") << ", host DDR "
          << fmt("%.1f GB", p.outcome.peak_ddr_bytes / 1e9)
          << (p.outcome.peak_ddr_bytes > dev.host_memory.capacity_per_device.value ? " (over)" : "") << ", step "
          << fmt("%.3f s", p.outcome.step_time_s);
    } else {
      out << " - " << p.outcome.reason;
    }
    out << "\n";
  }
  if (r.largest_fit) {
    out << "answer: " << vary_name(r.vary) << " " << r.largest_fit->value << " fits (peak HBM "
        << fmt("%.1f GB", r.largest_fit->outcome.peak_hbm_bytes / 1e9) << ")";
    if (r.smallest_miss) out << "; " << r.smallest_miss->value << " does not";
    out << "\n";
  } else {
    out << "answer: not even " << r.granularity << " fits\n";
  }
  return out.str();
}

std::string fit_json(const SweepSpace& space, const FitResult& r) {
  Json j;
  j["scenario"] = space.base().spec.name;
  j["vary"] = vary_name(r.vary);
  j["granularity"] = r.granularity;
  j["hbm_capacity_bytes"] = space.base().hardware.device.hbm_capacity.value;
  Json probes = Json::array();
  for (const FitProbe& p : r.probes) {
    Json e;
    e["value"] = p.value;
    e["fits"] = p.fits;
    e["outcome"] = outcome_json(p.outcome);
    probes.push_back(e);
  }
  j["probes"] = probes;
  j["largest_fit"] = r.largest_fit ? Json(r.largest_fit->value) : Json(nullptr);
  j["smallest_miss"] = r.smallest_miss ? Json(r.smallest_miss->value) : Json(nullptr);
  return j.dump(2) + "\n";
}

}  // namespace moesim
