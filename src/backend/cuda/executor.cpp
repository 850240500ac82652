// SPDX-License-Identifier: MIT
#include "backend/cuda/executor.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "backend/cuda/attention/sdpa.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/nvtx.hpp"
#include "backend/cuda/timer.hpp"
#include "backend/rank_bootstrap.hpp"
#include "core/error.hpp"

namespace moesim::cuda {

namespace {
const Program& program_of(const StepGraph& g, int64_t rank) {
  return g.programs[static_cast<size_t>(g.plan.program_of(rank))];
}
}  // namespace

QueuePlan plan_queues(const Program& p) {
  QueuePlan q;
  const size_t n = p.ops.size();
  q.queue.resize(n);
  q.waits.resize(n);
  q.queue_pred.assign(n, -1);
  std::array<int64_t, kNumQueues> last{};
  last.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = p.ops[i];
    const int qi = queue_of(op);
    q.queue[i] = static_cast<int8_t>(qi);
    q.queue_pred[i] = static_cast<int32_t>(last[static_cast<size_t>(qi)]);
    last[static_cast<size_t>(qi)] = static_cast<int64_t>(i);
    ++q.num_ops[static_cast<size_t>(qi)];
    for (uint32_t d : p.deps_of(op)) {
      if (d >= i) throw BackendError("op " + std::to_string(i) + " depends on a later op " + std::to_string(d));
      if (q.queue[d] == qi) continue;  // stream order already covers it
      auto& w = q.waits[i];
      if (std::find(w.begin(), w.end(), d) == w.end()) w.push_back(d);
    }
  }
  return q;
}

std::vector<Picoseconds> replay_schedule(const StepGraph& g, const std::vector<std::vector<Picoseconds>>& durations) {
  const int64_t n = g.plan.num_ranks();
  if (g.programs.size() != 1) throw BackendError("replay_schedule: one program (no pipeline stages) only");
  if (static_cast<int64_t>(durations.size()) != n) throw BackendError("replay_schedule: one duration list per rank");
  const Program& p = g.programs.front();
  const QueuePlan q = plan_queues(p);
  std::vector<std::vector<Picoseconds>> end(static_cast<size_t>(n), std::vector<Picoseconds>(p.ops.size(), 0));
  std::vector<Picoseconds> ready(static_cast<size_t>(n), 0);
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    for (int64_t r = 0; r < n; ++r) {
      auto& e = end[static_cast<size_t>(r)];
      Picoseconds t = q.queue_pred[i] >= 0 ? e[static_cast<size_t>(q.queue_pred[i])] : 0;
      for (uint32_t d : p.deps_of(op)) t = std::max(t, e[d]);
      ready[static_cast<size_t>(r)] = t;
    }
    for (int64_t r = 0; r < n; ++r) {
      Picoseconds start = ready[static_cast<size_t>(r)];
      if (is_collective(op.kind)) {
        for (int64_t m : g.plan.members(r, op.group)) start = std::max(start, ready[static_cast<size_t>(m)]);
      }
      const auto& d = durations[static_cast<size_t>(r)];
      if (d.size() != p.ops.size()) throw BackendError("replay_schedule: one duration per op");
      end[static_cast<size_t>(r)][i] = start + d[i];
    }
  }
  std::vector<Picoseconds> out(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < n; ++r) {
    for (Picoseconds t : end[static_cast<size_t>(r)]) out[static_cast<size_t>(r)] = std::max(out[static_cast<size_t>(r)], t);
  }
  return out;
}

std::vector<std::vector<Picoseconds>> op_durations(const StepGraph& g, const Timeline& t) {
  const int64_t n = g.plan.num_ranks();
  std::vector<std::vector<Picoseconds>> start(static_cast<size_t>(n)), end(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const size_t ops = program_of(g, r).ops.size();
    start[static_cast<size_t>(r)].assign(ops, 0);
    end[static_cast<size_t>(r)].assign(ops, 0);
  }
  for (const ExecRecord& e : t.records) {
    if (e.rank < 0 || e.rank >= n) continue;
    start[static_cast<size_t>(e.rank)][e.op] = e.start;
    end[static_cast<size_t>(e.rank)][e.op] = e.end;
  }
  std::vector<std::vector<Picoseconds>> d(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const Program& p = program_of(g, r);
    d[static_cast<size_t>(r)].resize(p.ops.size());
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      Picoseconds s = start[static_cast<size_t>(r)][i];
      if (is_collective(p.ops[i].kind)) {
        for (int64_t m : g.plan.members(r, p.ops[i].group)) s = std::max(s, start[static_cast<size_t>(m)][i]);
      }
      d[static_cast<size_t>(r)][i] = std::max<Picoseconds>(0, end[static_cast<size_t>(r)][i] - s);
    }
  }
  return d;
}

namespace {

GroupComm dry_comm(const StepGraph& g, int64_t rank, const Op& op) {
  GroupComm c;
  if (!is_communication(op.kind)) return c;
  c.size = static_cast<int>(g.plan.group_size(op.group));
  c.rank = static_cast<int>(g.plan.group_rank(rank, op.group));
  return c;
}

}  // namespace

ArenaSizes size_arenas(const StepGraph& g, const ModelSpec& model, int64_t rank, const RoutingPlan& routing,
                       bool cudnn_attention) {
  const Program& p = program_of(g, rank);
  Arena in;
  std::array<Arena, kNumQueues> out{};
  ArenaSizes sizes;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    const int q = queue_of(op);
    OpEnv env;
    env.graph = &g;
    env.model = &model;
    env.routing = &routing;
    env.rank = rank;
    env.dry = true;
    env.cudnn_attention = cudnn_attention;
    env.in = &in;
    env.out = &out[static_cast<size_t>(q)];
    env.comm = dry_comm(g, rank, op);
    launch_op(env, p, i);
  }
  sizes.in = in.high_water();
  for (int q = 0; q < kNumQueues; ++q) sizes.out[static_cast<size_t>(q)] = out[static_cast<size_t>(q)].high_water();
  return sizes;
}

int visible_gpus() { return device_count(); }

namespace {

template <class T>
T* device_alloc(size_t count, std::vector<void*>& owned) {
  if (count == 0) return nullptr;
  void* p = nullptr;
  MOESIM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
  owned.push_back(p);
  return static_cast<T*>(p);
}

template <class T>
T* upload(const std::vector<T>& host, std::vector<void*>& owned) {
  T* d = device_alloc<T>(host.size(), owned);
  if (d) MOESIM_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Random non-zero values over a device region, as BF16 bit patterns in [-1, 1) (FP32 operands
// carved from it read two of them: finite, non-zero).
void fill_random(void* p, size_t bytes, uint64_t seed, cudaStream_t stream) {
  if (p == nullptr || bytes < 2) return;
  fill_uniform(static_cast<bf16_bits*>(p), static_cast<int64_t>(bytes / 2), seed, -1.0f, 1.0f, stream);
}

// The rank's index tables: valid token ids, distinct experts per token, the permutation that
// groups assignments by expert, and causal DSA keys.
IndexTables build_tables(const StepGraph& g, const ModelSpec& m, int64_t rank, std::vector<void*>& owned) {
  IndexTables t;
  const int64_t tokens = std::max<int64_t>(g.tokens_per_micro_batch, 1);
  std::mt19937_64 rng(0x5eed + static_cast<uint64_t>(rank));
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& v : ids) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::max<int64_t>(m.vocab_size, 1)));
  t.token_ids = upload(ids, owned);
  for (auto& v : ids) v %= kChunkTargetRange;
  t.chunk_targets = upload(ids, owned);
  if (m.moe) {
    const int64_t e = m.moe->num_experts, k = m.moe->top_k;
    std::vector<int32_t> idx(static_cast<size_t>(tokens * k));
    for (int64_t r = 0; r < tokens; ++r) {
      const auto first = static_cast<int64_t>(rng() % static_cast<uint64_t>(e));
      for (int64_t j = 0; j < k; ++j) idx[static_cast<size_t>(r * k + j)] = static_cast<int32_t>((first + j) % e);
    }
    // Stable counting sort by expert: dest_row[a] = a's row in expert order.
    std::vector<int64_t> start(static_cast<size_t>(e + 1), 0);
    for (int32_t x : idx) ++start[static_cast<size_t>(x) + 1];
    for (int64_t x = 0; x < e; ++x) start[static_cast<size_t>(x + 1)] += start[static_cast<size_t>(x)];
    std::vector<int32_t> dest(idx.size());
    for (size_t a = 0; a < idx.size(); ++a) dest[a] = static_cast<int32_t>(start[static_cast<size_t>(idx[a])]++);
    t.expert_index = upload(idx, owned);
    t.dest_row = upload(dest, owned);
    std::vector<float> bias(static_cast<size_t>(e));
    for (auto& b : bias) b = static_cast<float>(rng() % 1000) * 1e-4f;
    t.router_bias = upload(bias, owned);
  }
  if (m.dsa_indexer) {
    const int64_t seq = std::max<int64_t>(1, std::min(g.seq_len, tokens));
    const int64_t k = std::min(m.dsa_indexer->top_k, seq);
    t.dsa_keys = upload(causal_dsa_keys(tokens, seq, k, rng()), owned);
  }
  std::vector<float> mix(64, 1.0f / 8);
  t.mix_weights = upload(mix, owned);
  return t;
}

// NCCL communicators: one per communication queue whose group has more than one member, one
// ncclCommInitAll per group instance. Every queue needs its own: operations on one communicator
// issued from several streams may deadlock. Pipeline sends and receives get one communicator per
// link - (channel, sender, receiver), the channel being activations or gradients - shared only by
// the sender's send queue and the receiver's receive queue of that channel, so that each end uses
// it from one stream and a send always meets its receive on the same communicator.
struct Comms {
  // [rank][queue]
  std::vector<std::array<GroupComm, kNumQueues>> of;
  // (channel, sender, receiver) -> the sender's and the receiver's communicator of that link
  std::map<std::tuple<int, int64_t, int64_t>, std::pair<ncclComm_t, ncclComm_t>> links;
  std::vector<ncclComm_t> all;
  ~Comms() {
    for (ncclComm_t c : all) (void)ncclCommDestroy(c);
  }
};

// One process drives every rank: one ncclCommInitAll per communicator instance.
void init_comms(const StepGraph& g, const std::vector<int>& devices, Comms& c) {
  c.of.assign(static_cast<size_t>(g.plan.num_ranks()), {});
  for (const CommunicatorInstance& inst : plan_communicators(g)) {
    std::vector<int> devs;
    for (int64_t m : inst.members) devs.push_back(devices[static_cast<size_t>(m)]);
    std::vector<ncclComm_t> comms(inst.members.size());
    MOESIM_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devs.size()), devs.data()));
    c.all.insert(c.all.end(), comms.begin(), comms.end());
    if (inst.communicator < 0) {
      c.links[inst.link] = {comms[0], comms[1]};
      continue;
    }
    for (size_t i = 0; i < inst.members.size(); ++i) {
      c.of[static_cast<size_t>(inst.members[i])][static_cast<size_t>(inst.communicator)] =
          GroupComm{comms[i], static_cast<int>(i), static_cast<int>(inst.members.size())};
    }
  }
}

// One rank per process: this process joins the instances that contain `rank`, in the plan's order
// (ncclCommInitRank blocks until every member has joined; plan_communicators says why this order
// cannot deadlock), with the unique ids process 0 made for every instance.
void init_rank_comms(const StepGraph& g, int64_t rank, Distributed& job, Comms& c) {
  const std::vector<CommunicatorInstance> instances = plan_communicators(g);
  const std::vector<std::string> ids = share_ids(job, instances.size(), [] {
    ncclUniqueId id;
    MOESIM_NCCL_CHECK(ncclGetUniqueId(&id));
    return std::string(id.internal, sizeof id.internal);
  });
  c.of.assign(static_cast<size_t>(g.plan.num_ranks()), {});
  for (size_t k = 0; k < instances.size(); ++k) {
    const CommunicatorInstance& inst = instances[k];
    const auto at = std::find(inst.members.begin(), inst.members.end(), rank);
    if (at == inst.members.end()) continue;
    const int index = static_cast<int>(at - inst.members.begin());
    ncclUniqueId id;
    if (ids[k].size() != sizeof id.internal) throw BackendError("init_rank_comms: an NCCL unique id of the wrong size");
    std::copy(ids[k].begin(), ids[k].end(), id.internal);
    ncclComm_t comm = nullptr;
    MOESIM_NCCL_CHECK(ncclCommInitRank(&comm, static_cast<int>(inst.members.size()), id, index));
    c.all.push_back(comm);
    if (inst.communicator < 0) {
      c.links[inst.link] = index == 0 ? std::pair<ncclComm_t, ncclComm_t>{comm, nullptr} : std::pair<ncclComm_t, ncclComm_t>{nullptr, comm};
    } else {
      c.of[static_cast<size_t>(rank)][static_cast<size_t>(inst.communicator)] =
          GroupComm{comm, index, static_cast<int>(inst.members.size())};
    }
  }
}

// Per-rank state of a run, owned by its thread.
struct RankState {
  int64_t rank = 0;
  int device = 0;
  const Program* program = nullptr;
  QueuePlan queues;
  RoutingPlan routing;
  ArenaSizes sizes;
  std::vector<void*> owned;  // cudaMalloc'd
  void* pinned = nullptr;
  size_t pinned_bytes = 0;
  std::array<cudaStream_t, kNumQueues> streams{};
  void* slab = nullptr;
  SlabPlan slab_plan;
  std::unique_ptr<Gemm> gemm;
  std::unique_ptr<Sdpa> sdpa;  // when flash attention runs through cuDNN
  Arena in;
  std::array<Arena, kNumQueues> out{};
  IndexTables tables;
  OptimizerState optimizer;
  // The step's events (timer.hpp): the step's start, then each op's start and end.
  EventPool events;
  static constexpr size_t kStepStart = 0;
  static size_t start_event(size_t op) { return 1 + 2 * op; }
  static size_t end_event(size_t op) { return 2 + 2 * op; }
  RankRun run;
  std::vector<Picoseconds> op_start, op_end;

  ~RankState() {
    if (device < 0) return;
    (void)cudaSetDevice(device);
    (void)cudaDeviceSynchronize();
    events = EventPool();
    gemm.reset();
    sdpa.reset();
    for (void* p : owned) (void)cudaFree(p);
    if (pinned) (void)cudaFreeHost(pinned);
    for (cudaStream_t s : streams) {
      if (s) (void)cudaStreamDestroy(s);
    }
    if (slab) (void)cudaFree(slab);
  }
};

void setup_rank(RankState& r, const Scenario& sc, const StepGraph& g, bool cudnn_attention) {
  MOESIM_CUDA_CHECK(cudaSetDevice(r.device));
  MOESIM_CUDA_CHECK(cudaFree(nullptr));  // create the context
  size_t free_b = 0, total_b = 0;
  MOESIM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  r.run.context_bytes = static_cast<double>(total_b - free_b);
  r.run.device_name = device_info(r.device).name;
  for (int q = 0; q < kNumQueues; ++q) {
    if (r.queues.num_ops[static_cast<size_t>(q)] > 0 || q == kComputeQueue) {
      MOESIM_CUDA_CHECK(cudaStreamCreateWithFlags(&r.streams[static_cast<size_t>(q)], cudaStreamNonBlocking));
    }
  }
  // Persistent state, for real.
  const PersistentMemory& pm = r.program->persistent;
  auto* params = device_alloc<bf16_bits>(static_cast<size_t>(pm.params / 2), r.owned);
  auto* master = device_alloc<float>(static_cast<size_t>(pm.master_params / 4), r.owned);
  auto* grads = device_alloc<float>(static_cast<size_t>(pm.grads / 4), r.owned);
  auto* states = device_alloc<float>(static_cast<size_t>(pm.optimizer_states / 4), r.owned);
  r.run.persistent_bytes = pm.params + pm.master_params + pm.grads + pm.optimizer_states;
  r.run.program_order_peak_bytes += r.run.persistent_bytes;
  const auto half_states = static_cast<int64_t>(pm.optimizer_states / 8);
  // The BF16 working copy is persistent only when the plan keeps one (frozen or LoRA bases);
  // full training with FSDP2 casts the FP32 master when gathering.
  int64_t capacity = std::min({static_cast<int64_t>(pm.master_params / 4), static_cast<int64_t>(pm.grads / 4), half_states});
  if (params) capacity = std::min(capacity, static_cast<int64_t>(pm.params / 2));
  r.optimizer = OptimizerState{master, grads, states, states ? states + half_states : nullptr, params, capacity};
  cudaStream_t s0 = r.streams[kComputeQueue];
  fill_random(params, static_cast<size_t>(pm.params), 11, s0);
  fill_random(master, static_cast<size_t>(pm.master_params), 12, s0);
  fill_random(grads, static_cast<size_t>(pm.grads), 13, s0);
  fill_random(states, static_cast<size_t>(pm.optimizer_states), 14, s0);
  MOESIM_CUDA_CHECK(cudaStreamSynchronize(s0));  // random state: AdamW's numerics are not measured here

  // The executor's own memory (not part of the step).
  MOESIM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const double before = static_cast<double>(total_b - free_b);
  void* in = device_alloc<char>(r.sizes.in, r.owned);
  fill_random(in, r.sizes.in, 21 + static_cast<uint64_t>(r.rank), s0);
  r.in = Arena(in, r.sizes.in);
  for (int q = 0; q < kNumQueues; ++q) {
    const size_t bytes = r.sizes.out[static_cast<size_t>(q)];
    void* o = device_alloc<char>(bytes, r.owned);
    fill_random(o, bytes, 31 + static_cast<uint64_t>(q), s0);
    r.out[static_cast<size_t>(q)] = Arena(o, bytes);
  }
  r.tables = build_tables(g, sc.model, r.rank, r.owned);
  r.gemm = std::make_unique<Gemm>();
  // Its plans and their workspace are built on the first step (a warm-up), as PyTorch's are.
  if (cudnn_attention) r.sdpa = std::make_unique<Sdpa>();
  MOESIM_CUDA_CHECK(cudaStreamSynchronize(s0));
  MOESIM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  r.run.executor_bytes = static_cast<double>(total_b - free_b) - before;
  r.pinned_bytes = pinned_bytes_needed(*r.program);
  if (r.pinned_bytes > 0) MOESIM_CUDA_CHECK(cudaMallocHost(&r.pinned, r.pinned_bytes));

  r.events = EventPool(1 + 2 * r.program->ops.size());
}

// Issues one step on the rank's streams (the host runs ahead; the GPU follows the dependencies),
// each op inside an NVTX range named as the simulator's trace names it (nvtx.hpp), within one per
// run of ops of a micro-batch.
void issue_step(RankState& r, const StepGraph& g, const Scenario& sc, const Comms& comms, bool cudnn_attention) {
  const Program& p = *r.program;
  NvtxMicroBatchRange micro_range;
  cudaStream_t s0 = r.streams[kComputeQueue];
  r.events.record(RankState::kStepStart, s0);
  for (int q = 0; q < kNumQueues; ++q) {
    cudaStream_t s = r.streams[static_cast<size_t>(q)];
    if (s && q != kComputeQueue) MOESIM_CUDA_CHECK(cudaStreamWaitEvent(s, r.events[RankState::kStepStart], 0));
  }
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    micro_range.enter(op.micro);
    const NvtxRange op_range(p.name_of(op));
    const int q = r.queues.queue[i];
    cudaStream_t s = r.streams[static_cast<size_t>(q)];
    for (uint32_t d : r.queues.waits[i]) MOESIM_CUDA_CHECK(cudaStreamWaitEvent(s, r.events[RankState::end_event(d)], 0));
    if (r.slab) {
      for (uint32_t d : r.slab_plan.waits[i]) {
        MOESIM_CUDA_CHECK(cudaStreamWaitEvent(s, r.events[RankState::end_event(d)], 0));
      }
    }
    r.events.record(RankState::start_event(i), s);
    OpEnv env;
    env.graph = &g;
    env.model = &sc.model;
    env.routing = &r.routing;
    env.rank = r.rank;
    env.dry = false;
    env.stream = s;
    env.gemm = r.gemm.get();
    env.cudnn_attention = cudnn_attention;
    env.sdpa = r.sdpa.get();
    env.in = &r.in;
    env.out = &r.out[static_cast<size_t>(q)];
    env.tables = r.tables;
    env.optimizer = &r.optimizer;
    env.pinned = r.pinned;
    env.pinned_bytes = r.pinned_bytes;
    if (is_pipeline_p2p(op)) {
      const auto link = pipeline_link(g, r.rank, op);
      if (std::get<1>(link) >= 0) {
        const auto& [sender_comm, receiver_comm] = comms.links.at(link);
        const bool sends = op.kind == OpKind::send;
        env.comm = GroupComm{sends ? sender_comm : receiver_comm, sends ? 0 : 1, 2, sends ? 1 : 0};
      } else {
        env.comm = GroupComm{};  // no peer: nothing to exchange
      }
    } else if (is_communication(op.kind)) {
      env.comm = comms.of[static_cast<size_t>(r.rank)][static_cast<size_t>(communicator_of(op))];
    }
    launch_op(env, p, i);
    r.events.record(RankState::end_event(i), s);
  }
}

void collect_step(RankState& r) {
  MOESIM_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t n = r.program->ops.size();
  r.op_start.resize(n);
  r.op_end.resize(n);
  Picoseconds last = 0;
  for (size_t i = 0; i < n; ++i) {
    r.op_start[i] = std::max<Picoseconds>(0, r.events.picoseconds_between(RankState::kStepStart, RankState::start_event(i)));
    r.op_end[i] = std::max(r.op_start[i], r.events.picoseconds_between(RankState::kStepStart, RankState::end_event(i)));
    last = std::max(last, r.op_end[i]);
  }
  r.run.end = last;
  size_t free_b = 0, total_b = 0;
  MOESIM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  r.run.device_bytes = static_cast<double>(total_b - free_b) - r.run.executor_bytes;
}

// Places the transient tensors on the op times of the step just run and allocates the slab.
void place_slab(RankState& r) {
  r.slab_plan = plan_slab(*r.program, r.op_start, r.op_end);
  r.run.slab_bytes = static_cast<double>(r.slab_plan.slab_bytes);
  r.run.slab_waits = 0;
  for (const auto& w : r.slab_plan.waits) r.run.slab_waits += static_cast<int64_t>(w.size());
  if (r.slab_plan.slab_bytes > 0) MOESIM_CUDA_CHECK(cudaMalloc(&r.slab, r.slab_plan.slab_bytes));
}

// What every execution checks before any GPU work.
void check_executable(const Scenario& sc, const ExecOptions& opt) {
  if (!sc.spec.fused_ops.flash_attention) {
    // Its score and context products are weightless batched GEMMs the kernels here do not run.
    throw InputError(sc.file, "/fused_ops/flash_attention",
                     "the executor runs flash attention only; the materialised core is simulated, not executed");
  }
  if (sc.spec.parallel.pp.schedule == PipelineSchedule::dualpipe) {
    // Its links carry messages both ways and between mirror stages; the executor's pipeline
    // communicators join each stage with its neighbours in one direction only.
    throw InputError(sc.file, "/parallel/pp/schedule", "dualpipe is simulated, not executed, by this version");
  }
  if (sc.spec.parallel.ep > 1 && (sc.spec.overlap.moe_local_first || sc.spec.overlap.moe_dispatch_chunks > 1)) {
    // Their expert GEMMs take a part of each expert's rows; the executor's routing plan gives
    // every routed op the whole of them.
    throw InputError(sc.file, sc.spec.overlap.moe_local_first ? "/overlap/moe_local_first" : "/overlap/moe_dispatch_chunks",
                     "local-first and chunked expert dispatch are simulated, not executed, by this version");
  }
  if (sc.spec.parallel.tp.comm_overlap != TpCommOverlap::none && sc.spec.parallel.tp.degree > 1) {
    // Its projections run in pieces whose inputs are the ring's chunks, which the executor does not pass.
    throw InputError(sc.file, "/parallel/tp/comm_overlap",
                     "TP communication overlap is simulated, not executed, by this version");
  }
  const ParallelSpec& par = sc.spec.parallel;
  if (par.cp > 1 && par.cp_kv_heads != CpKvHeads::kv) {
    // The gathered keys and values would hold the query heads, where the attention kernels read
    // the model's key/value heads.
    throw InputError(sc.file, "/parallel/cp_kv_heads", "keys and values exchanged at the query heads are simulated, not executed, by this version");
  }
  if (par.cp > 1 && par.cp_grad_format && *par.cp_grad_format != sc.spec.training.precision.activations) {
    // The gradients' reduce-scatter would move another format than the buffers the executor keeps.
    throw InputError(sc.file, "/parallel/cp_grad_format",
                     "key/value gradients exchanged in another format than the activations are simulated, not executed, by this version");
  }
  const bool drops = sc.spec.routing.capacity_factor && sc.spec.routing.capacity_policy == CapacityPolicy::drop;
  if (drops || sc.spec.routing.devices_per_token > 0) {
    // The executor's routing plan draws dropless loads (or pads to capacity) and sends a copy per expert.
    throw InputError(sc.file, drops ? "/routing/capacity_policy" : "/routing/devices_per_token",
                     "dropping at capacity and device-limited routing are simulated, not executed, by this version "
                     "(capacity_policy pad is executed)");
  }
  if (opt.measured_steps < 1 || opt.warmup_steps < 1) {
    throw BackendError("execute: warmup_steps and measured_steps must be >= 1 (the slab is placed on a warm-up step's times)");
  }
}

// Dense attention through cuDNN's fused SDPA when the library loads (what a training stack
// runs); otherwise the backend's own kernels, and `why_not` says why.
bool use_cudnn_attention(const StepGraph& g, bool& has_flash_attention, std::string& why_not) {
  has_flash_attention = false;
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) has_flash_attention = has_flash_attention || op.kind == OpKind::flash_attention;
  }
  return has_flash_attention && cudnn_sdpa_available(&why_not);
}

std::string attention_kernels(bool has_flash_attention, bool cudnn_attention, const std::string& no_cudnn) {
  return !has_flash_attention ? "no flash_attention op"
         : cudnn_attention    ? "cudnn " + std::to_string(cudnn_sdpa_version())
                              : "backend kernels (" + no_cudnn + ")";
}

// A rank's CPU-side plans: every op has a kernel and every buffer balances before any GPU work.
std::unique_ptr<RankState> prepare_rank(const Scenario& sc, const StepGraph& g, int64_t r, const ExecOptions& opt,
                                        bool cudnn_attention) {
  auto st = std::make_unique<RankState>();
  st->rank = r;
  st->device = -1;  // nothing to release until set up
  st->program = &program_of(g, r);
  st->queues = plan_queues(*st->program);
  const BufferPlan buffers = plan_buffers(*st->program);  // throws for an unbalanced program, before any GPU work
  st->routing = build_routing_plan(g, r, opt.routing_step);
  st->sizes = size_arenas(g, sc.model, r, st->routing, cudnn_attention);
  st->run.rank = static_cast<int32_t>(r);
  st->run.program_order_peak_bytes = buffers.program_order_peak_bytes;  // persistent added at setup
  return st;
}

// One step of a rank after the host barrier that starts it: issue, wait, read the op times; the
// last warm-up step places the slab; a measured step is kept. The step's NVTX range spans the issue
// and the wait for the GPU, so that on the host's timeline it lasts as long as the step.
void run_step(RankState& r, const StepGraph& g, const Scenario& sc, const Comms& comms, bool cudnn_attention,
              const ExecOptions& opt, int step, RankMeasurement& kept) {
  const bool warmup = step < opt.warmup_steps;
  {
    const NvtxRange step_range((warmup ? "warm-up step " : "step ") +
                               std::to_string(warmup ? step : step - opt.warmup_steps));
    issue_step(r, g, sc, comms, cudnn_attention);
    collect_step(r);
  }
  if (step == opt.warmup_steps - 1) place_slab(r);
  if (step >= opt.warmup_steps) {
    RankRun run = r.run;
    run.device = r.device;
    kept.steps.push_back(MeasuredStep{r.op_start, r.op_end, std::move(run)});
  }
}

}  // namespace

ExecResult execute(const Scenario& sc, const StepGraph& g, const ExecOptions& opt) {
  const int64_t n = g.plan.num_ranks();
  const int gpus = visible_gpus();
  if (n != gpus) {
    throw InputError(sc.file, "/num_devices",
                     "the plan has " + std::to_string(n) + " rank(s) but " + std::to_string(gpus) +
                         " GPU(s) are visible; `moesim run` needs one GPU per rank (set CUDA_VISIBLE_DEVICES or num_devices)");
  }
  check_executable(sc, opt);
  bool has_flash_attention = false;
  std::string no_cudnn;
  const bool cudnn_attention = use_cudnn_attention(g, has_flash_attention, no_cudnn);
  std::vector<std::unique_ptr<RankState>> ranks;
  std::vector<int> devices;
  for (int64_t r = 0; r < n; ++r) {
    ranks.push_back(prepare_rank(sc, g, r, opt, cudnn_attention));
    devices.push_back(static_cast<int>(r));
  }
  Comms comms;
  init_comms(g, devices, comms);

  const int total_steps = opt.warmup_steps + opt.measured_steps;
  std::barrier sync(static_cast<std::ptrdiff_t>(n));
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  std::vector<RankMeasurement> measured(static_cast<size_t>(n));

  auto body = [&](int64_t rank) {
    RankState& r = *ranks[static_cast<size_t>(rank)];
    RankMeasurement& kept = measured[static_cast<size_t>(rank)];
    kept.rank = static_cast<int32_t>(rank);
    try {
      r.device = static_cast<int>(rank);
      setup_rank(r, sc, g, cudnn_attention);
      for (int step = 0; step < total_steps; ++step) {
        sync.arrive_and_wait();
        if (failed) return;
        MOESIM_CUDA_CHECK(cudaDeviceSynchronize());
        sync.arrive_and_wait();
        run_step(r, g, sc, comms, cudnn_attention, opt, step, kept);
      }
    } catch (...) {
      {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      failed = true;
      sync.arrive_and_drop();
    }
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);

  ExecResult res = assemble_result(g, measured);
  res.attention_kernels = attention_kernels(has_flash_attention, cudnn_attention, no_cudnn);
  return res;
}

ExecResult execute(const Scenario& sc, const StepGraph& g, const ExecOptions& opt, Distributed& job) {
  if (!job.started_by_launcher()) return execute(sc, g, opt);
  const int64_t n = g.plan.num_ranks();
  if (n != job.size()) {
    throw InputError(sc.file, "/num_devices",
                     "the plan has " + std::to_string(n) + " rank(s) but the job has " + std::to_string(job.size()) +
                         " process(es); under mpirun each process runs one rank (mpirun -np " + std::to_string(n) + ")");
  }
  check_executable(sc, opt);
  const ProcessPlacement place = place_process(job);
  int device = -1;
  agree_on_input(job, [&] { device = device_of(place, visible_gpus(), "mpirun"); });
  char bus_id[64] = {};
  MOESIM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
  check_distinct_devices(job, place, bus_id, "mpirun");
  bool has_flash_attention = false;
  std::string no_cudnn;
  const bool cudnn_attention = use_cudnn_attention(g, has_flash_attention, no_cudnn);
  const int64_t rank = job.rank();
  std::unique_ptr<RankState> r;
  agree_on_input(job, [&] { r = prepare_rank(sc, g, rank, opt, cudnn_attention); });
  MOESIM_CUDA_CHECK(cudaSetDevice(device));
  Comms comms;
  init_rank_comms(g, rank, job, comms);

  RankMeasurement kept;
  kept.rank = static_cast<int32_t>(rank);
  r->device = device;
  setup_rank(*r, sc, g, cudnn_attention);
  for (int step = 0; step < opt.warmup_steps + opt.measured_steps; ++step) {
    job.barrier();
    MOESIM_CUDA_CHECK(cudaDeviceSynchronize());
    job.barrier();
    run_step(*r, g, sc, comms, cudnn_attention, opt, step, kept);
  }
  const std::vector<std::string> all = job.gather(encode_measurement(kept));
  if (job.rank() != 0) return ExecResult{};
  std::vector<RankMeasurement> measured;
  for (const std::string& bytes : all) measured.push_back(decode_measurement(bytes));
  ExecResult res = assemble_result(g, measured);
  res.attention_kernels = attention_kernels(has_flash_attention, cudnn_attention, no_cudnn);
  return res;
}

}  // namespace moesim::cuda
