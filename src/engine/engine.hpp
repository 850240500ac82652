// SPDX-License-Identifier: MIT
// The discrete-event engine: runs every rank's program of a StepGraph on the machine the cost
// model describes, and reports when each op ran and how much memory each rank held.
//
// Its parts, one job each:
//   event_queue.hpp    the event heap on (time, sequence): same-time events in FIFO order
//   program_index.*    per program: successors, queue predecessors, collective match indices
//   rendezvous.hpp     where collectives and send/receive pairs meet across ranks
//   flow_network.*     the transfers in flight as flows on ports, host links and switch instances
//   max_min.*          weighted max-min sharing of ports, host links and switch instances
//   switch_tiers.*     which switch instances a transfer crosses, with what weight
//   rank_classes.*     interchangeable ranks (--distinct-ranks)
//   slot_map.*         the ranks simulated ("slots"): every rank, or one per class
//   expert_loads.*     the routing draw's rows and all-to-all bytes of the MoE ops per slot
//   step_analysis.*    post-run: time by op, critical path, exposed time, deadlock report
//   sampled_steps.*    a graph's sampled steps on worker threads, an engine each
//   engine.cpp         the event loop: ops are issued, start and end, transfers meet and become
//                      flows, memory effects apply
//
// Execution rules (the contract of program.hpp and queues.hpp, with communicators explicit):
//   - compute ops run in order on the compute queue, host copies on the copy queue,
//     communication on one queue per process-group kind (one NCCL communicator and stream
//     each), and pipeline sends/receives on a queue per direction; so an FSDP all-gather, an EP
//     all-to-all and a swap copy overlap one another;
//   - an op starts when the op before it on its queue and its explicit dependencies are done, and
//     not before the host issued it: the host issues a rank's ops in program order without
//     waiting for the GPU, spending StepGraph::host_op_issue_s + the op's kernels x
//     host_kernel_issue_s on each (scenario host.op_issue, host.kernel_issue);
//   - a collective starts when every member of its group has reached it (rendezvous.hpp), a send
//     when its receive is posted and vice versa;
//   - after its latency, a transfer is a flow over shared resources of capacity 1 (max_min.hpp):
//     a collective occupies the fabric port (scale-up or NIC) of every member with weight 1, and
//     each switch instance its traffic crosses with the weight switch_tiers.hpp derives; a swap
//     copy occupies its rank's host link in its direction with weight 1 and, when host memory
//     sits behind the scale-up fabric, the scale-up port with weight copy bandwidth / port
//     bandwidth. A flow alone takes the cost model's transfer time; rates are max-min fair,
//     recomputed once at each instant where flows start or end;
//   - compute started while a transfer of the rank is moving runs slower by the hardware's
//     overlap_slowdown (a pipeline send or receive counts from when its pair meets); a rank's
//     speed factor (a straggler) stretches its kernels, its compute slowdown (a slow part) its
//     compute-bound kernels alone;
//   - memory effects apply at an op's start (allocations, swap-in) and end (frees, swap-out);
//   - a step is complete or an error: if an op never ran, run() throws SimulationError with a
//     deadlock report instead of returning a step time.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cost/cost_model.hpp"
#include "graph/timeline.hpp"
#include "graph/step_graph.hpp"
#include "memory/rank_memory.hpp"

namespace moesim {

// The simulation could not finish a step (its programs deadlock): an internal error, never a
// step time. The message is a deadlock report (deadlock_report, step_analysis.hpp).
class SimulationError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct EngineOptions {
  int64_t step = 0;                   // routing sample index
  bool record_timeline = false;       // keep every op execution (for traces)
  int64_t record_memory_ranks = 1;    // memory samples for the first N ranks (when recording)
  std::vector<double> rank_speed;     // per-rank slowdown factors (1 = nominal); empty: all 1
  // Per-rank factors on compute-bound kernels' time alone, the SM clock's share (a slow part:
  // scenario/device_spread.hpp); memory-bound time keeps HBM's pace. Empty: all 1.
  std::vector<double> rank_compute_slowdown;
  // The sampler expert loads are drawn from, when not the graph's own: a sweep over routing
  // reuses one graph (and one engine) without changing it. Must outlive the run.
  const RoutingSampler* routing = nullptr;
  // Simulate one representative per class of interchangeable ranks (same program, same speed,
  // same classes of peers in every group) instead of every rank; see rank_classes.hpp. Exact when the
  // members' loads are equal; with sampled routing each class runs its slowest member's loads.
  bool distinct_ranks = false;
  // Verify every max-min sharing against its definition (tests): StepResult counts the checks
  // and the violations.
  bool check_max_min = false;
  // Stop after this many events (0: run the step to its end). A stopped run is not a step: it
  // returns StepResult::complete = false with only the event count and the time reached, and
  // none of the post-run analysis (a fuzz target runs scenarios this far, tests/fuzz/).
  int64_t max_events = 0;
};

struct StepResult {
  // false: EngineOptions::max_events stopped the run; then only num_events, num_simulated_ranks
  // and step_time (the time of the last event handled) are set.
  bool complete = true;
  Picoseconds step_time = 0;
  std::vector<Picoseconds> rank_end;
  std::vector<RankMemory> memory;     // per rank
  Timeline timeline;                  // when recorded
  int64_t num_events = 0;
  int64_t num_simulated_ranks = 0;    // all ranks, or one per class with distinct_ranks
  int64_t max_min_checks = 0;         // with EngineOptions::check_max_min
  int64_t max_min_violations = 0;
  int32_t slowest_rank = 0;
  double slowest_rank_compute_slowdown = 1;  // its EngineOptions::rank_compute_slowdown
  // Load balance of the expert layers: the busiest EP member's expert rows over the balanced
  // T x top_k, averaged over the (layer, micro-batch, EP group) the step sampled; 0 without
  // sampled routing.
  double ep_load_imbalance = 0;
  // The busy time per queue and op kind (ps) of slowest_rank: the rank that ends the step, the
  // lowest-numbered of several (all breakdowns below are of this rank).
  std::vector<std::pair<OpKind, Picoseconds>> compute_busy;  // by kind
  std::vector<std::pair<OpKind, Picoseconds>> comm_busy;     // by kind, summed over the rank's queues
  // The slowest rank's compute stream, split: time running compute kernels, and every other
  // moment of the step by what held it (see exposed_time, step_analysis.hpp): a collective's kind
  // ("all_gather", ...; both while it waits for one and while one runs on the compute stream),
  // "pipeline_bubble" (waiting for a pipeline send/receive), "swap" (waiting for a copy from
  // host memory), "data_parallel" (FSDP2's copies on its communication streams), "host" (waiting
  // for the host to issue the op). compute_stream_busy + the sum of `exposed` = step_time.
  Picoseconds compute_stream_busy = 0;
  std::vector<std::pair<std::string, Picoseconds>> exposed;
  // The slowest rank's ops with the most time, by op name (summed over micro-batches): where the
  // step goes.
  std::vector<std::pair<std::string, Picoseconds>> top_ops;
  // The chain of ops that set the step's end (see critical_path, step_analysis.hpp), their time summed
  // by op name, largest first; and how many ops the chain has.
  std::vector<std::pair<std::string, Picoseconds>> critical_path;
  int64_t critical_path_length = 0;
};

// The engine keeps references to the graph and the cost model and indexes the graph's programs
// once; neither may change while the engine lives. Each run draws expert loads from the graph's
// routing sampler or the one EngineOptions::routing names.
class Engine {
 public:
  Engine(const StepGraph& graph, const CostModel& cost);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  StepResult run(const EngineOptions& options);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moesim
