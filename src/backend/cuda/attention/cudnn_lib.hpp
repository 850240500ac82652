// SPDX-License-Identifier: MIT
// cuDNN, loaded at run time. The backend is built against the toolkit's cuDNN 9 headers but does
// not link libcudnn: the library is opened on first use (dlopen), so that a machine without cuDNN
// still runs every command that needs no cuDNN, and one that needs it fails with a message that
// says what is missing instead of a loader error at start-up.
//
// Which library: $MOESIM_CUDNN_LIBRARY when set (a path, e.g. PyTorch's copy), else libcudnn.so.9 on
// the default library path. Required: major version 9 and at least kMinCudnnVersion (the GPU
// machine's system cuDNN; nothing newer is used). Only the backend (graph) API and the handle
// functions are resolved - the entry points listed in CudnnApi.
#pragma once

#include <cudnn_backend.h>

#include <string>

namespace moesim::cuda::cudnn {

// cudnnGetVersion()'s encoding for 9.x: major * 10000 + minor * 100 + patch.
inline constexpr size_t kMinCudnnVersion = 91400;

struct CudnnApi {
  size_t version = 0;  // cudnnGetVersion() of the loaded library
  std::string path;    // what was opened
  decltype(&::cudnnGetVersion) get_version = nullptr;
  decltype(&::cudnnGetErrorString) get_error_string = nullptr;
  decltype(&::cudnnGetLastErrorString) get_last_error_string = nullptr;
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnDestroy) destroy = nullptr;
  decltype(&::cudnnSetStream) set_stream = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) backend_create_descriptor = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) backend_destroy_descriptor = nullptr;
  decltype(&::cudnnBackendSetAttribute) backend_set_attribute = nullptr;
  decltype(&::cudnnBackendGetAttribute) backend_get_attribute = nullptr;
  decltype(&::cudnnBackendFinalize) backend_finalize = nullptr;
  decltype(&::cudnnBackendExecute) backend_execute = nullptr;
};

// Opens `path` and resolves the entry points without caching anything; on failure returns false
// and says why in `why` (library not found, a symbol missing, version too old). For tests and
// for `api()`.
bool load_cudnn(const std::string& path, CudnnApi& out, std::string& why);

// The process's cuDNN, loaded once (thread-safe). Throws BackendError with load_cudnn's reason.
const CudnnApi& api();

// Whether api() succeeds; never throws. `why` (optional) gets the reason when it does not.
bool available(std::string* why = nullptr);

// Throws BackendError naming the call, cuDNN's status string and last error message, file:line.
void check(cudnnStatus_t status, const char* call, const char* file, int line);

}  // namespace moesim::cuda::cudnn

#define MOESIM_CUDNN_CHECK(call) ::moesim::cuda::cudnn::check((call), #call, __FILE__, __LINE__)
