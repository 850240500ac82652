// SPDX-License-Identifier: MIT
// NVTX ranges, so that Nsight Systems shows the executor's step the way the simulator's trace
// does: in the domain "moesim", a range per step, per run of consecutive ops of one micro-batch
// ("micro-batch N", the trace's `micro` argument) and per op, named exactly as the op is named in
// `moesim graph export` and in the Chrome trace of `simulate --trace` (Program::name_of). The
// ranges mark when the host issues the work; Nsight projects them onto the GPU work they enclose.
//
// nvtx3 is header-only (the CUDA toolkit's include/nvtx3; it loads a tool's injection library
// through dlopen when NVTX_INJECTION64_PATH is set, which Nsight does). With no tool attached,
// every call returns after one check of a function pointer, so the ranges stay in every build.
// Ranges are per host thread and must nest: push and pop on the thread that issues the work.
#pragma once

#include <cstdint>
#include <string>

#include <nvtx3/nvToolsExt.h>

namespace moesim::cuda {

inline nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("moesim");
  return domain;
}

inline void nvtx_push(const char* name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_domain(), &a);
}
inline void nvtx_pop() { nvtxDomainRangePop(nvtx_domain()); }

// One range for a scope.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtx_push(name); }
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  ~NvtxRange() { nvtx_pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// At most one "micro-batch N" range open at a time, switched as the issued ops' micro-batch
// changes (ops of no micro-batch, -1, such as the optimizer's, get none); closed on destruction.
class NvtxMicroBatchRange {
 public:
  NvtxMicroBatchRange() = default;
  ~NvtxMicroBatchRange() { enter(-1); }
  NvtxMicroBatchRange(const NvtxMicroBatchRange&) = delete;
  NvtxMicroBatchRange& operator=(const NvtxMicroBatchRange&) = delete;

  void enter(int32_t micro) {
    if (micro == open_) return;
    if (open_ >= 0) nvtx_pop();
    if (micro >= 0) nvtx_push(("micro-batch " + std::to_string(micro)).c_str());
    open_ = micro;
  }

 private:
  int32_t open_ = -1;
};

}  // namespace moesim::cuda
