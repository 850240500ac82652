// SPDX-License-Identifier: MIT
// CPU references of the attention kernels: plain C++, double throughout, written from the
// definitions (recurrences and softmax as in docs/modelling.md), not from the kernels' algorithms, so
// that a shared mistake is unlikely. Inputs are the values the GPU sees (BF16 inputs widened to
// double), layouts as in the kernel headers. Small shapes only: the backward references keep
// every per-token state. Built with the other kernels' references (../reference.hpp) into one
// library, backend_reference, which links nothing from CUDA.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cuda/attention/dsa.hpp"
#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/attention/mla_attention.hpp"
#include "backend/cuda/attention/sdpa.hpp"

namespace moesim::cuda::ref {

using In = std::span<const double>;
using Out = std::span<double>;

// KDA (any head dims): o [B,T,H,dv]. The recurrence token by token.
void kda_forward(const KdaShape& s, In q, In k, In v, In g, In beta, double scale, Out o);
// Gradients of sum(o * d_o) with respect to every input.
void kda_backward(const KdaShape& s, In q, In k, In v, In g, In beta, In d_o, double scale, Out dq, Out dk, Out dv,
                  Out dg, Out dbeta);

// Causal softmax attention with grouped key/value heads (query head h reads key/value head
// h / (Hq / Hkv)); layouts as sdpa.hpp: o [B,T,Hq,dv], lse [B,Hq,T] (natural log). The backward
// sums each key/value head's gradient over its group.
void sdpa_forward(const SdpaShape& s, In q, In k, In v, double scale, Out o, Out lse);
void sdpa_backward(const SdpaShape& s, In q, In k, In v, In d_o, double scale, Out dq, Out dk, Out dv);

// The same with as many key/value heads as query heads (MLA's core after the kv_b expansion).
void mla_forward(const MlaShape& s, In q, In k, In v, double scale, Out o, Out lse);
void mla_backward(const MlaShape& s, In q, In k, In v, In d_o, double scale, Out dq, Out dk, Out dv);

// Lightning indexer: scores [B,T,T], entry (t, s) = sum_j w(t,j) ReLU(q(t,j) . k(s)) for s <= t,
// 0 above the diagonal.
void dsa_indexer(const DsaIndexerShape& s, In q, In k, In w, Out scores);
// Gradients of sum(scores * d_scores) (causal entries only).
void dsa_indexer_backward(const DsaIndexerShape& s, In q, In k, In w, In d_scores, Out dq, Out dk, Out dw);

// Sparse MQA attention over selected latents: idx [B,T,top_k] int32 (-1 = unused slot);
// o [B,T,H,latent], lse [B,T,H].
void dsa_sparse_forward(const DsaAttentionShape& s, In q, In kv, std::span<const int32_t> idx, double scale, Out o,
                        Out lse);
void dsa_sparse_backward(const DsaAttentionShape& s, In q, In kv, std::span<const int32_t> idx, In d_o, double scale,
                         Out dq, Out dkv);

}  // namespace moesim::cuda::ref
