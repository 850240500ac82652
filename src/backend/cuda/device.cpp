// SPDX-License-Identifier: MIT
#include "backend/cuda/device.hpp"

#include "backend/cuda/check.hpp"

namespace moesim::cuda {
namespace {

std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  MOESIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo d;
  d.name = prop.name;
  d.num_sms = prop.multiProcessorCount;
  d.memory_bytes = static_cast<double>(prop.totalGlobalMem);
  d.l2_bytes = static_cast<double>(prop.l2CacheSize);
  int v = 0;
  MOESIM_CUDA_CHECK(cudaDriverGetVersion(&v));
  d.driver = cuda_version(v);
  MOESIM_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  d.runtime = cuda_version(v);
  const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  d.cublas = std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100) + "." + std::to_string(lt % 100);
  int nv = 0;
  MOESIM_NCCL_CHECK(ncclGetVersion(&nv));  // major * 10000 + minor * 100 + patch since 2.9
  d.nccl = std::to_string(nv / 10000) + "." + std::to_string(nv / 100 % 100) + "." + std::to_string(nv % 100);
  return d;
}

}  // namespace moesim::cuda
