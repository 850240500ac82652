// SPDX-License-Identifier: MIT
// One launch per op: what the executor (executor.hpp) issues for each op of a rank program, on
// device buffers of the op's real shapes and dtypes - cuBLASLt GEMMs for gemm / lora_gemm and the
// router, grouped GEMMs for the experts, the backend's norm, activation, router, permute, loss and
// AdamW kernels (kernels.hpp), the attention kernels (attention/; dense attention through cuDNN's
// fused SDPA when OpEnv::cudnn_attention), NCCL for communication and
// pinned-host copies for swap.
//
// Contract: this backend measures time and memory, not numerics. Operands are carved from arenas
// filled once with random non-zero values; values do not flow from op to op (an op reads random
// inputs and writes its outputs to scratch). Index operands (token ids, expert choices, the DSA
// top-k keys, the permutation of assignments) come from tables of valid indices built once per
// rank. Kernel numerics are tested separately against CPU references (tests/backend/).
//
// Every launch is written once and runs in two modes: dry (no device: operands are only counted,
// which sizes the arenas and lets CPU tests check that every op of a graph has a launch) and
// live. An op kind (or phase) without a kernel throws BackendError naming the op and its kind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "backend/cuda/bf16.hpp"
#include "graph/step_graph.hpp"

namespace moesim::cuda {

class Gemm;
class Sdpa;

// A bump allocator over one device region. Dry: base is null, take() only counts.
class Arena {
 public:
  Arena() = default;
  Arena(void* base, size_t size) : base_(static_cast<char*>(base)), size_(size) {}
  // `count` elements of T, 256-byte aligned; throws BackendError past the end (live mode).
  template <class T>
  T* take(int64_t count) {
    return static_cast<T*>(take_bytes(static_cast<size_t>(count < 0 ? 0 : count) * sizeof(T)));
  }
  void* take_bytes(size_t bytes);
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_; }
  bool dry() const { return base_ == nullptr; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
  size_t high_ = 0;
};

// Expert traffic of one MoE layer and micro-batch on one rank, in rows (token-expert assignments).
struct RoutingSlice {
  std::vector<int32_t> rows_per_expert;  // this rank's local experts
  std::vector<int64_t> send_rows;        // dispatch direction: rows to each EP peer (by EP index)
  std::vector<int64_t> recv_rows;        // dispatch direction: rows from each EP peer
  int64_t row_bytes = 0;                 // bytes of one row on the wire (set per op from comm_bytes)
};

// Per (routing layer, micro-batch). Sampled like the engine (same sampler, step and keys): with
// EP = 2 from RoutingSampler::sample_group_loads, so that each rank's expert rows equal the
// engine's; with EP > 2 from per-sender send counts (rows then differ from the engine's group
// loads by sampling noise); with EP = 1 the expected rows split evenly over the experts.
using RoutingPlan = std::map<std::pair<int32_t, int32_t>, RoutingSlice>;
RoutingPlan build_routing_plan(const StepGraph& graph, int64_t rank, int64_t step);

inline constexpr int32_t kChunkTargetRange = 512;

// Device tables of valid indices, built once per rank (null pointers in a dry run).
struct IndexTables {
  const int32_t* token_ids = nullptr;     // [tokens], < vocab
  const int32_t* chunk_targets = nullptr; // [tokens], < kChunkTargetRange: targets inside one CCE vocabulary chunk
  const int32_t* expert_index = nullptr;  // [tokens * top_k], distinct experts per token
  const int32_t* dest_row = nullptr;      // [tokens * top_k], a permutation grouped by expert
  const int32_t* dsa_keys = nullptr;      // [tokens * dsa top_k], causal keys (or -1)
  float* router_bias = nullptr;           // [num_experts]
  float* mix_weights = nullptr;           // [64] Attention Residuals weights
};

// The persistent state the optimizer updates in place (FP32 master, grads, moments; BF16 copy).
struct OptimizerState {
  float* master = nullptr;
  float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  bf16_bits* param = nullptr;
  int64_t capacity = 0;  // elements each holds
};

// A communicator of the op's group on this rank (null when the group has one member).
struct GroupComm {
  ncclComm_t comm = nullptr;
  int rank = 0;  // this rank's index in the group
  int size = 1;
  int peer = -1;  // send / recv on a communicator of the two ends only: the peer's index in it
};

// What one launch needs. Everything device-side is null/empty in a dry run.
struct OpEnv {
  const StepGraph* graph = nullptr;
  const ModelSpec* model = nullptr;
  const RoutingPlan* routing = nullptr;
  int64_t rank = 0;
  bool dry = true;
  cudaStream_t stream = nullptr;
  Gemm* gemm = nullptr;
  Arena* in = nullptr;     // random inputs, read only
  Arena* out = nullptr;    // this queue's outputs and workspaces
  IndexTables tables;
  OptimizerState* optimizer = nullptr;
  void* pinned = nullptr;  // pinned host scratch for swap copies
  size_t pinned_bytes = 0;
  GroupComm comm;          // for communication ops
  // flash_attention through cuDNN's fused SDPA (attention/sdpa.hpp: BF16 gradients, FP32 scratch
  // from `out`; MLA's core, and MHA / GQA with the model's key/value heads) instead of the
  // backend's own MLA kernels (FP32 gradients; GQA's key/value heads expanded per query head). The same in the dry run
  // that sizes the arenas and in the live runs; `sdpa` is the device's (required when live).
  // A shape cuDNN does not take, or a backward the loaded cuDNN cannot run (sdpa_shape_supported,
  // sdpa_backward_supported), uses the backend's kernels.
  bool cudnn_attention = false;
  Sdpa* sdpa = nullptr;
};

// Issues op `i` of `p` (both arenas are reset first). Throws BackendError for an op without a kernel.
void launch_op(OpEnv& env, const Program& p, uint32_t i);

// Causal DSA key indices, `k` per token of `tokens` rows of sequences of length `seq`: a position
// that has at most k earlier keys (itself included) takes keys 0..pos (the rest -1), later ones k
// random earlier keys. What the sparse attention kernels read in place of the indexer's top-k.
std::vector<int32_t> causal_dsa_keys(int64_t tokens, int64_t seq, int64_t k, uint64_t seed);

// The pinned host bytes the swap copies of `p` need (the largest copy: copies share one scratch).
size_t pinned_bytes_needed(const Program& p);

// Executor kernels (op_kernels.cu): the ops kernels.hpp has no launcher for. BF16 as bf16_bits.
namespace exec_kernels {
// out[r] = table[ids[r]] (ids clamped to the table): the embedding lookup.
void gather_rows(const bf16_bits* table, const int32_t* ids, int64_t rows, int64_t cols, int64_t table_rows, bf16_bits* out,
                 cudaStream_t stream);
// grad[ids[r]] += dy[r] in FP32 (ids clamped to the table): the embedding table's gradient.
void scatter_add_rows(const bf16_bits* dy, const int32_t* ids, int64_t rows, int64_t cols, int64_t table_rows, float* grad,
                      cudaStream_t stream);
// Depthwise causal convolution of width `width` along rows (w [channels, width]); `transposed`
// runs it backwards in time (the input gradient).
void short_conv(const bf16_bits* x, const bf16_bits* w, int64_t rows, int64_t channels, int width, bool transposed,
                bf16_bits* y, cudaStream_t stream);
// Attention Residuals: y = sum_s weights[s] x_s over `sources` stacked inputs of n elements.
void residual_mix(const bf16_bits* x, const float* weights, int sources, int64_t n, bf16_bits* y, cudaStream_t stream);
void residual_mix_backward(const bf16_bits* dy, const float* weights, int sources, int64_t n, bf16_bits* dx,
                           cudaStream_t stream);
// GQA key/value heads expanded to the query heads, for attention kernels that take k with q's
// heads: x [rows, heads_kv, d] -> y [rows, heads_kv * group, d], query head h reading key/value
// head h / group (as sdpa.hpp's grouping).
void repeat_kv_heads(const bf16_bits* x, int64_t rows, int64_t heads_kv, int group, int64_t d, bf16_bits* y,
                     cudaStream_t stream);
// Its adjoint on gradients: dx[r, j, :] = sum over the group's g of dy[r, j * group + g, :] (FP32).
void sum_kv_head_groups(const float* dy, int64_t rows, int64_t heads_kv, int group, int64_t d, float* dx,
                        cudaStream_t stream);
// The traffic of a copy that reads n_in 2-byte elements and writes n_out: every input is read
// once and every output written once. n_in >= n_out: out[i] = sum of in[i], in[i + n_out], ...
// (a cast from a wider format, or an accumulation, folded); else out[i] = in[floor(i n_in / n_out)]
// (a widening cast; the ratio in double). FSDP2's copy-in, copy-out and gradient copies, which
// the graph keeps as bytes.
void move_bytes(const bf16_bits* in, int64_t n_in, bf16_bits* out, int64_t n_out, cudaStream_t stream);
}  // namespace exec_kernels

}  // namespace moesim::cuda
