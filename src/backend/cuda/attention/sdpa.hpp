// SPDX-License-Identifier: MIT
// Dense causal attention through cuDNN's fused scaled-dot-product attention (flash attention in
// cuDNN's runtime-compiled engines), forward and backward, BF16 in and out with FP32 softmax
// statistics: what PyTorch's SDPA runs with the cuDNN backend. Covers MHA, GQA/MQA (fewer key /
// value heads than query heads) and MLA's core (qk 192 / v 128, k and v expanded per head).
//
// Layouts (as the other attention kernels, batch outermost, [batch, seq, heads, dim]):
// q [B, T, Hq, dqk]; k [B, T, Hkv, dqk]; v [B, T, Hkv, dv]; o, d_o [B, T, Hq, dv];
// lse [B, Hq, T] FP32 (natural log of the softmax denominator of the scaled scores);
// dq, dk, dv like q, k, v, in BF16 (cuDNN writes BF16 gradients; dq goes through an FP32
// accumulator in the scratch). Query head h reads key/value head h / (Hq / Hkv).
//
// Use: one Sdpa per device (it owns a cuDNN handle and the plans, built on first use of a shape and
// cached; plan building takes milliseconds to a second, so warm up). Supported: dqk, dv multiples
// of 8 up to 256, Hq a multiple of Hkv, T >= 2. cuDNN 9.14 and 9.15's backward needs T a multiple
// of 128 (without it cuDNN's own frontend adds a padding mask, which this wrapper does not build):
// sdpa_backward_supported() says whether the loaded library can run a shape's backward.
// Without cuDNN at build time or at run time (cudnn_lib.hpp) the Sdpa constructor throws
// BackendError with the reason; cudnn_sdpa_available() says so beforehand. Shape checks, scratch
// sizes and costs need no cuDNN.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/attention/attention_common.hpp"

namespace moesim::cuda {

struct SdpaShape {
  int64_t batch = 1;
  int64_t seq = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;  // divides heads_q; equal for MHA (and MLA)
  int64_t head_dim_qk = 128;
  int64_t head_dim_v = 128;
};

// Whether cuDNN's fused attention takes the shape (head dims, head grouping, sizes); never throws.
bool sdpa_shape_supported(const SdpaShape& s);
// Throws std::invalid_argument, saying why, for a shape sdpa_shape_supported() refuses.
void sdpa_check_shape(const SdpaShape& s);

// Whether the backward of `s` can run with the cuDNN loaded in this process (false also when
// cuDNN is missing or the shape is unsupported); never throws.
bool sdpa_backward_supported(const SdpaShape& s);

// Whether cuDNN was built in and loads (never throws); `why` gets the reason when it does not.
bool cudnn_sdpa_available(std::string* why = nullptr);
// cudnnGetVersion() of the loaded library (91400 for 9.14.0); 0 without one.
size_t cudnn_sdpa_version();

// Device scratch the caller passes to backward(): the FP32 rowsum(dO * O) [B, Hq, T] and the FP32
// dq accumulator [B, Hq, T, dqk]. CPU-computable (the executor sizes its arenas without a GPU).
size_t sdpa_backward_scratch_bytes(const SdpaShape& s);

// Forward FLOPs 2 * Hq * (dqk + dv) per causal (query, key) pair (the graph's flash_attention);
// backward twice that. Bytes: inputs read once, outputs written once.
KernelCost sdpa_forward_cost(const SdpaShape& s);
KernelCost sdpa_backward_cost(const SdpaShape& s);

class Sdpa {
 public:
  // On the current device. Throws BackendError when cuDNN is missing or too old.
  Sdpa();
  ~Sdpa();
  Sdpa(const Sdpa&) = delete;
  Sdpa& operator=(const Sdpa&) = delete;

  void forward(const SdpaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale, bf16_bits* o,
               float* lse, cudaStream_t stream);
  // `scratch`: sdpa_backward_scratch_bytes(s), 16-byte aligned; contents need not be initialised.
  void backward(const SdpaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const bf16_bits* o,
                const float* lse, const bf16_bits* d_o, float scale, bf16_bits* dq, bf16_bits* dk, bf16_bits* dv,
                void* scratch, cudaStream_t stream);

  // Plans built so far (a forward and a backward per shape) and the workspace they share (held
  // here, grown when a plan needs more; cuDNN's fused attention plans usually need none).
  size_t num_plans() const;
  size_t workspace_bytes() const;
  // "fwd B1 T8192 Hq96 Hkv96 dqk192 dv128: engine 8, workspace 0 B" per plan, for logs.
  std::string describe_plans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moesim::cuda
