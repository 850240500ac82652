// SPDX-License-Identifier: MIT
// Error checks for CUDA, cuBLAS and NCCL calls: a failure throws BackendError naming the call,
// the library's message, and file:line. Library code never exits; src/app reports the error.
#pragma once

#include <stdexcept>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

namespace moesim::cuda {

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_backend_error(const char* lib, const char* call, const std::string& what,
                                             const char* file, int line) {
  throw BackendError(std::string(lib) + " error in " + call + ": " + what + " (" + file + ":" + std::to_string(line) +
                     ")");
}

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_backend_error("CUDA", call, cudaGetErrorString(e), file, line);
}
inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw_backend_error("cuBLAS", call, "status " + std::to_string(static_cast<int>(s)), file, line);
  }
}
inline void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  if (r != ncclSuccess) throw_backend_error("NCCL", call, ncclGetErrorString(r), file, line);
}

}  // namespace moesim::cuda

#define MOESIM_CUDA_CHECK(call) ::moesim::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define MOESIM_CUBLAS_CHECK(call) ::moesim::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define MOESIM_NCCL_CHECK(call) ::moesim::cuda::check_nccl((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration shows up here, not at the next synchronisation.
#define MOESIM_LAUNCH_CHECK() ::moesim::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
