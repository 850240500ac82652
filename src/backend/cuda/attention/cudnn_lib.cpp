// SPDX-License-Identifier: MIT
// cuDNN loaded at run time; see cudnn_lib.hpp.
#include "backend/cuda/attention/cudnn_lib.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "backend/cuda/check.hpp"

namespace moesim::cuda::cudnn {
namespace {

constexpr const char* kDefaultLibrary = "libcudnn.so.9";

std::string version_string(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

template <class Fn>
bool resolve(void* lib, const char* name, Fn& fn, std::string& why) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) why = "cuDNN library lacks " + std::string(name) + " (not a cuDNN 9 library?)";
  return fn != nullptr;
}

struct Loaded {
  CudnnApi api;
  std::string why;
  bool ok = false;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    const char* env = std::getenv("MOESIM_CUDNN_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : kDefaultLibrary;
    r.ok = load_cudnn(path, r.api, r.why);
    return r;
  }();
  return l;
}

}  // namespace

bool load_cudnn(const std::string& path, CudnnApi& out, std::string& why) {
  // Never closed: the library stays loaded for the process, as a linked one would.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    why = "cuDNN is not available: cannot load " + path + " (" + (err ? err : "unknown error") +
          "); install cuDNN 9 (>= " + version_string(kMinCudnnVersion) +
          ") on the library path or set MOESIM_CUDNN_LIBRARY to its libcudnn.so.9";
    return false;
  }
  CudnnApi a;
  a.path = path;
  const bool all = resolve(lib, "cudnnGetVersion", a.get_version, why) &&
                   resolve(lib, "cudnnGetErrorString", a.get_error_string, why) &&
                   resolve(lib, "cudnnGetLastErrorString", a.get_last_error_string, why) &&
                   resolve(lib, "cudnnCreate", a.create, why) && resolve(lib, "cudnnDestroy", a.destroy, why) &&
                   resolve(lib, "cudnnSetStream", a.set_stream, why) &&
                   resolve(lib, "cudnnBackendCreateDescriptor", a.backend_create_descriptor, why) &&
                   resolve(lib, "cudnnBackendDestroyDescriptor", a.backend_destroy_descriptor, why) &&
                   resolve(lib, "cudnnBackendSetAttribute", a.backend_set_attribute, why) &&
                   resolve(lib, "cudnnBackendGetAttribute", a.backend_get_attribute, why) &&
                   resolve(lib, "cudnnBackendFinalize", a.backend_finalize, why) &&
                   resolve(lib, "cudnnBackendExecute", a.backend_execute, why);
  if (!all) {
    why += " in " + path;
    return false;
  }
  a.version = a.get_version();
  if (a.version / 10000 != 9 || a.version < kMinCudnnVersion) {
    why = "cuDNN " + version_string(a.version) + " in " + path + " is not supported: need 9.x >= " +
          version_string(kMinCudnnVersion);
    return false;
  }
  out = a;
  return true;
}

const CudnnApi& api() {
  const Loaded& l = loaded();
  if (!l.ok) throw BackendError(l.why);
  return l.api;
}

bool available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why != nullptr) *why = l.why;
  return l.ok;
}

void check(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const CudnnApi& a = api();
  char last[512] = {};
  a.get_last_error_string(last, sizeof last);
  std::string what = a.get_error_string(status);
  if (last[0] != '\0') what += ": " + std::string(last);
  throw_backend_error("cuDNN", call, what, file, line);
}

}  // namespace moesim::cuda::cudnn
