// SPDX-License-Identifier: MIT
// Timing of the attention kernels on random inputs; see attention_timing.hpp.
#include <cmath>
#include <functional>
#include <string>

#include "backend/cuda/attention/attention_timing.hpp"
#include "backend/cuda/buffer.hpp"
#include "backend/cuda/kernels_common.cuh"
#include "backend/cuda/timer.hpp"

namespace moesim::cuda {
namespace {

// timer.hpp's convention (warm-ups, then repeats timed one event pair each, the median) on the
// default stream, in milliseconds. `rep` counts calls: the callers alternate two input sets.
double median_ms(const std::function<void(int rep)>& launch, const TimingOptions& opt) {
  return time_on_stream(nullptr, opt.warmup, opt.repeats, launch).median_s * 1e3;
}

__device__ __forceinline__ float hash_uniform(uint64_t i, uint64_t seed) {
  uint64_t z = i + seed * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}

// Uniform values in [lo, hi) (never all zero: timing zeros can flatter some hardware paths).
__global__ void fill_bf16_kernel(bf16_bits* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = detail::to_bf(lo + (hi - lo) * hash_uniform(static_cast<uint64_t>(i), seed));
  }
}
__global__ void fill_f32_kernel(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = lo + (hi - lo) * hash_uniform(static_cast<uint64_t>(i), seed);
  }
}

uint64_t next_seed() {
  static uint64_t s = 1;
  return ++s;
}

DeviceBuffer<bf16_bits> random_bf16(int64_t n, float lo, float hi) {
  DeviceBuffer<bf16_bits> b(static_cast<size_t>(n));
  fill_bf16_kernel<<<1024, 256>>>(b.data(), n, next_seed(), lo, hi);
  MOESIM_LAUNCH_CHECK();
  return b;
}
DeviceBuffer<float> random_f32(int64_t n, float lo, float hi) {
  DeviceBuffer<float> b(static_cast<size_t>(n));
  fill_f32_kernel<<<1024, 256>>>(b.data(), n, next_seed(), lo, hi);
  MOESIM_LAUNCH_CHECK();
  return b;
}

std::string dims(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s;
  for (const auto& [k, v] : kv) {
    if (!s.empty()) s.push_back(' ');
    s.append(k).push_back('=');
    s.append(std::to_string(v));
  }
  return s;
}

}  // namespace

std::vector<KernelTiming> time_kda(const KdaShape& s, const TimingOptions& opt) {
  kda_check_shape(s);
  const int64_t nk = s.batch * s.seq * s.heads * s.head_dim_k, nv = s.batch * s.seq * s.heads * s.head_dim_v;
  const int64_t nt = s.batch * s.seq * s.heads;
  // Unit-norm-like q, k rows (uniform entries of variance 1/dk), decays in [-1, -0.01].
  const float a = std::sqrt(3.0f / static_cast<float>(s.head_dim_k));
  struct Set {
    DeviceBuffer<bf16_bits> q, k, v, d_o;
    DeviceBuffer<float> g, beta;
  };
  Set sets[2];
  for (auto& st : sets) {
    st = Set{random_bf16(nk, -a, a), random_bf16(nk, -a, a),        random_bf16(nv, -1, 1),
             random_bf16(nv, -1, 1), random_f32(nk, -1.0f, -0.01f), random_f32(nt, 0.05f, 0.95f)};
  }
  DeviceBuffer<bf16_bits> o(static_cast<size_t>(nv));
  DeviceBuffer<float> dq(static_cast<size_t>(nk)), dk(static_cast<size_t>(nk)), dv(static_cast<size_t>(nv)),
      dg(static_cast<size_t>(nk)), db(static_cast<size_t>(nt));
  DeviceBuffer<uint8_t> ws(std::max(kda_forward_workspace_bytes(s), kda_backward_workspace_bytes(s)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim_k));
  const std::string shape =
      dims({{"B", s.batch}, {"T", s.seq}, {"H", s.heads}, {"dk", s.head_dim_k}, {"dv", s.head_dim_v}});
  std::vector<KernelTiming> out;
  out.push_back({"kda_forward", shape,
                 median_ms([&](int rep) {
                       auto& st = sets[rep % 2];
                       kda_forward(s, st.q.data(), st.k.data(), st.v.data(), st.g.data(), st.beta.data(), scale,
                                   o.data(), ws.data(), nullptr);
                     },
                     opt),
                 kda_forward_cost(s)});
  out.push_back({"kda_backward", shape,
                 median_ms([&](int rep) {
                       auto& st = sets[rep % 2];
                       kda_backward(s, st.q.data(), st.k.data(), st.v.data(), st.g.data(), st.beta.data(),
                                    st.d_o.data(), scale, dq.data(), dk.data(), dv.data(), dg.data(), db.data(),
                                    ws.data(), nullptr);
                     },
                     opt),
                 kda_backward_cost(s)});
  KernelCost both = kda_forward_cost(s);
  both.flops += kda_backward_cost(s).flops;
  both.bytes += kda_backward_cost(s).bytes;
  out.push_back({"kda_fwd_bwd", shape,
                 median_ms([&](int rep) {
                       auto& st = sets[rep % 2];
                       kda_forward(s, st.q.data(), st.k.data(), st.v.data(), st.g.data(), st.beta.data(), scale,
                                   o.data(), ws.data(), nullptr);
                       kda_backward(s, st.q.data(), st.k.data(), st.v.data(), st.g.data(), st.beta.data(),
                                    st.d_o.data(), scale, dq.data(), dk.data(), dv.data(), dg.data(), db.data(),
                                    ws.data(), nullptr);
                     },
                     opt),
                 both});
  return out;
}

std::vector<KernelTiming> time_mla(const MlaShape& s, const TimingOptions& opt) {
  mla_check_shape(s);
  const int64_t nq = s.batch * s.seq * s.heads * s.head_dim_qk, nv = s.batch * s.seq * s.heads * s.head_dim_v;
  const int64_t nl = s.batch * s.seq * s.heads;
  struct Set {
    DeviceBuffer<bf16_bits> q, k, v, d_o;
  };
  Set sets[2];
  for (auto& st : sets)
    st = Set{random_bf16(nq, -1, 1), random_bf16(nq, -1, 1), random_bf16(nv, -1, 1), random_bf16(nv, -1, 1)};
  DeviceBuffer<bf16_bits> o(static_cast<size_t>(nv));
  DeviceBuffer<float> lse(static_cast<size_t>(nl)), dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nq)),
      dv(static_cast<size_t>(nv));
  DeviceBuffer<uint8_t> ws(mla_backward_workspace_bytes(s));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim_qk));
  const std::string shape =
      dims({{"B", s.batch}, {"T", s.seq}, {"H", s.heads}, {"dqk", s.head_dim_qk}, {"dv", s.head_dim_v}});
  std::vector<KernelTiming> out;
  for (auto impl : {AttentionImpl::tensor_core, AttentionImpl::simt}) {
    const std::string suffix = impl == AttentionImpl::simt ? "_simt" : "";
    out.push_back({"mla_forward" + suffix, shape,
                   median_ms([&](int rep) {
                         auto& st = sets[rep % 2];
                         mla_forward(s, st.q.data(), st.k.data(), st.v.data(), scale, o.data(), lse.data(), nullptr,
                                     impl);
                       },
                       opt),
                   mla_forward_cost(s)});
    // The backward reuses the last forward's o and lse: values, not a matched pair, matter here.
    out.push_back({"mla_backward" + suffix, shape,
                   median_ms([&](int rep) {
                         auto& st = sets[rep % 2];
                         mla_backward(s, st.q.data(), st.k.data(), st.v.data(), o.data(), lse.data(), st.d_o.data(),
                                      scale, dq.data(), dk.data(), dv.data(), ws.data(), nullptr, impl);
                       },
                       opt),
                   mla_backward_cost(s)});
  }
  return out;
}

std::vector<KernelTiming> time_sdpa(const SdpaShape& s, const std::string& label, const TimingOptions& opt) {
  sdpa_check_shape(s);
  const int64_t tq = s.batch * s.seq * s.heads_q, tk = s.batch * s.seq * s.heads_kv;
  const int64_t nq = tq * s.head_dim_qk, nk = tk * s.head_dim_qk, nv = tk * s.head_dim_v, no = tq * s.head_dim_v;
  struct Set {
    DeviceBuffer<bf16_bits> q, k, v, d_o;
  };
  Set sets[2];
  for (auto& st : sets)
    st = Set{random_bf16(nq, -1, 1), random_bf16(nk, -1, 1), random_bf16(nv, -1, 1), random_bf16(no, -1, 1)};
  DeviceBuffer<bf16_bits> o(static_cast<size_t>(no)), dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nk)),
      dv(static_cast<size_t>(nv));
  DeviceBuffer<float> lse(static_cast<size_t>(tq));
  DeviceBuffer<uint8_t> scratch(sdpa_backward_scratch_bytes(s));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim_qk));
  Sdpa sdpa;
  const std::string shape = dims({{"B", s.batch},
                                  {"T", s.seq},
                                  {"Hq", s.heads_q},
                                  {"Hkv", s.heads_kv},
                                  {"dqk", s.head_dim_qk},
                                  {"dv", s.head_dim_v}});
  auto fwd = [&](int rep) {
    auto& st = sets[rep % 2];
    sdpa.forward(s, st.q.data(), st.k.data(), st.v.data(), scale, o.data(), lse.data(), nullptr);
  };
  // The backward reuses the last forward's o and lse: values, not a matched pair, matter here.
  auto bwd = [&](int rep) {
    auto& st = sets[rep % 2];
    sdpa.backward(s, st.q.data(), st.k.data(), st.v.data(), o.data(), lse.data(), st.d_o.data(), scale, dq.data(),
                  dk.data(), dv.data(), scratch.data(), nullptr);
  };
  const KernelCost cf = sdpa_forward_cost(s), cb = sdpa_backward_cost(s);
  std::vector<KernelTiming> out;
  out.push_back({label + "_forward", shape, median_ms(fwd, opt), cf});
  out.push_back({label + "_backward", shape, median_ms(bwd, opt), cb});
  out.push_back({label + "_fwd_bwd", shape,
                 median_ms([&](int rep) {
                       fwd(rep);
                       bwd(rep);
                     },
                     opt),
                 KernelCost{cf.flops + cb.flops, cf.bytes + cb.bytes}});
  return out;
}

std::vector<KernelTiming> time_dsa(const DsaIndexerShape& ix, const DsaAttentionShape& at, const TimingOptions& opt) {
  dsa_check_shape(ix);
  dsa_check_shape(at);
  if (ix.seq != at.seq || ix.batch != at.batch || ix.top_k != at.top_k) {
    throw std::invalid_argument("time_dsa: indexer and attention shapes disagree on batch, seq or top_k");
  }
  const int64_t T = ix.seq, B = ix.batch;
  const int64_t niq = B * T * ix.heads * ix.head_dim, nik = B * T * ix.head_dim, niw = B * T * ix.heads;
  const int64_t dqk = at.latent + at.rope;
  const int64_t nq = B * T * at.heads * dqk, nkv = B * T * dqk, no = B * T * at.heads * at.latent;
  const float a = 1.0f / std::sqrt(static_cast<float>(ix.head_dim));
  struct Set {
    DeviceBuffer<bf16_bits> iq, ik;
    DeviceBuffer<float> iw, ids;
    DeviceBuffer<bf16_bits> q, kv, d_o;
  };
  Set sets[2];
  for (auto& st : sets) {
    st = Set{random_bf16(niq, -1, 1), random_bf16(nik, -a, a), random_f32(niw, -1, 1), random_f32(B * T * T, -1, 1),
             random_bf16(nq, -1, 1),  random_bf16(nkv, -1, 1), random_bf16(no, -1, 1)};
  }
  DeviceBuffer<float> scores(static_cast<size_t>(B * T * T)), dq_i(static_cast<size_t>(niq)),
      dk_i(static_cast<size_t>(nik)), dw_i(static_cast<size_t>(niw));
  DeviceBuffer<int32_t> idx(static_cast<size_t>(B * T * ix.top_k));
  DeviceBuffer<bf16_bits> o(static_cast<size_t>(no));
  DeviceBuffer<float> lse(static_cast<size_t>(B * T * at.heads)), dq(static_cast<size_t>(nq)),
      dkv(static_cast<size_t>(nkv));
  DeviceBuffer<uint8_t> ws(dsa_sparse_backward_workspace_bytes(at));
  const float scale = 1.0f / std::sqrt(192.0f);
  const std::string ishape = dims({{"B", B}, {"T", T}, {"Hi", ix.heads}, {"di", ix.head_dim}});
  const std::string kshape = dims({{"B", B}, {"T", T}, {"k", ix.top_k}});
  const std::string ashape =
      dims({{"B", B}, {"T", T}, {"H", at.heads}, {"latent", at.latent}, {"rope", at.rope}, {"k", at.top_k}});
  std::vector<KernelTiming> out;
  auto time = [&](const char* name, const std::string& shape, KernelCost cost, auto&& fn) {
    out.push_back({name, shape, median_ms(fn, opt), cost});
  };
  time("dsa_indexer", ishape, dsa_indexer_cost(ix), [&](int rep) {
    auto& st = sets[rep % 2];
    dsa_indexer_scores(ix, st.iq.data(), st.ik.data(), st.iw.data(), scores.data(), nullptr);
  });
  time("dsa_indexer_backward", ishape, dsa_indexer_backward_cost(ix), [&](int rep) {
    auto& st = sets[rep % 2];
    dsa_indexer_backward(ix, st.iq.data(), st.ik.data(), st.iw.data(), st.ids.data(), dq_i.data(), dk_i.data(),
                         dw_i.data(), nullptr);
  });
  time("dsa_topk", kshape, dsa_topk_cost(ix), [&](int) { dsa_topk(ix, scores.data(), idx.data(), nullptr); });
  time("dsa_sparse_forward", ashape, dsa_sparse_forward_cost(at), [&](int rep) {
    auto& st = sets[rep % 2];
    dsa_sparse_forward(at, st.q.data(), st.kv.data(), idx.data(), scale, o.data(), lse.data(), nullptr);
  });
  time("dsa_sparse_backward", ashape, dsa_sparse_backward_cost(at), [&](int rep) {
    auto& st = sets[rep % 2];
    dsa_sparse_backward(at, st.q.data(), st.kv.data(), idx.data(), o.data(), lse.data(), st.d_o.data(), scale,
                        dq.data(), dkv.data(), ws.data(), nullptr);
  });
  return out;
}

}  // namespace moesim::cuda
