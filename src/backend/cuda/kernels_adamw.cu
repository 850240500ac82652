// SPDX-License-Identifier: MIT
// AdamW on FP32 master weights; the bias corrections are computed once on the host in double.
#include <cmath>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, inv_bc1, inv_bc2;
};

__global__ void adamw_kernel(float* __restrict__ master, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, bf16_bits* __restrict__ param, int64_t n, AdamWArgs a) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float w = master[i];
    w -= a.lr * (mi * a.inv_bc1 / (sqrtf(vi * a.inv_bc2) + a.eps) + a.weight_decay * w);
    master[i] = w;
    if (param) param[i] = detail::to_bf(w);
  }
}

}  // namespace

void adamw_step(float* master, const float* grad, float* m, float* v, bf16_bits* param, int64_t n, const AdamWConfig& cfg,
                cudaStream_t stream) {
  if (cfg.step < 1) throw BackendError("adamw_step: step is 1-based");
  if (n == 0) return;
  const double t = static_cast<double>(cfg.step);
  const AdamWArgs a{static_cast<float>(cfg.lr),
                    static_cast<float>(cfg.beta1),
                    static_cast<float>(cfg.beta2),
                    static_cast<float>(cfg.eps),
                    static_cast<float>(cfg.weight_decay),
                    static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta1, t))),
                    static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta2, t)))};
  const int64_t blocks = std::min<int64_t>(detail::ceil_div(n, 256), 65536);
  adamw_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(master, grad, m, v, param, n, a);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
