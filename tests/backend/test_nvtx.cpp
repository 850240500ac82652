// SPDX-License-Identifier: MIT
// The executor's NVTX ranges (nvtx.hpp) as a profiler sees them, without a GPU or a profiler: this
// test links a static NVTX injection (the nvtx3 load sequence's "InitializeInjectionNvtx2_fnptr",
// which a tool's static library would define) that records every domain creation, push and pop.
// Checks the domain's name, the names pushed, that every push is popped in order, and the
// micro-batch range's switching.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

// This file defines the injection, so nvtx3 must not define its weak default; nvtx3 reads the
// pointer before its own types are in scope, so it is declared here with the same type
// (NvtxInitializeInjectionNvtxFunc_t: int (*)(NvtxGetExportTableFunc_t)).
#define NVTX_STATIC_INJECTION_IMPL
extern "C" int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(uint32_t));

#include "backend/cuda/nvtx.hpp"

using namespace moesim::cuda;

namespace {

struct Recorded {
  std::vector<std::string> domains;  // names of the domains created, in order
  std::vector<std::string> events;   // "push DOMAIN NAME" or "pop DOMAIN"
};
Recorded& recorded() {
  static Recorded r;
  return r;
}

// Domain handles are indices + 1 into recorded().domains, so that a handle names its domain.
nvtxDomainHandle_t NVTX_API create_domain(const char* name) {
  recorded().domains.emplace_back(name);
  return reinterpret_cast<nvtxDomainHandle_t>(recorded().domains.size());
}
std::string domain_name(nvtxDomainHandle_t d) {
  const auto i = reinterpret_cast<size_t>(d);
  return i >= 1 && i <= recorded().domains.size() ? recorded().domains[i - 1] : "?";
}
int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const bool ascii = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII;
  recorded().events.push_back("push " + domain_name(d) + " " + (ascii ? a->message.ascii : "<not ascii>"));
  return 0;
}
int NVTX_API pop(nvtxDomainHandle_t d) {
  recorded().events.push_back("pop " + domain_name(d));
  return 0;
}

int NVTX_API initialize(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  if (size <= NVTX_CBID_CORE2_DomainCreateA) return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&create_domain);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}

}  // namespace

NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = &initialize;

TEST_CASE("NVTX: ranges in the domain moesim, named as given, popped in order") {
  recorded().events.clear();
  {
    const NvtxRange step("step 0");
    {
      const NvtxRange op(std::string("layers.3.attn.q_proj"));
    }
  }
  CHECK(recorded().domains == std::vector<std::string>{"moesim"});
  CHECK(recorded().events == std::vector<std::string>{"push moesim step 0", "push moesim layers.3.attn.q_proj",
                                                       "pop moesim", "pop moesim"});
}

TEST_CASE("NVTX: one micro-batch range open at a time, switched when the micro-batch changes") {
  recorded().events.clear();
  {
    NvtxMicroBatchRange micro;
    micro.enter(0);
    micro.enter(0);   // same micro-batch: the range stays open
    micro.enter(1);   // closes 0, opens 1
    micro.enter(-1);  // a per-step op: no range
    micro.enter(-1);
    micro.enter(2);
  }  // closes 2
  CHECK(recorded().events == std::vector<std::string>{"push moesim micro-batch 0", "pop moesim",
                                                       "push moesim micro-batch 1", "pop moesim",
                                                       "push moesim micro-batch 2", "pop moesim"});
}

TEST_CASE("NVTX: the pattern issue_step follows - step, micro-batch runs, ops - nests and balances") {
  recorded().events.clear();
  struct FakeOp {
    const char* name;
    int32_t micro;
  };
  const std::vector<FakeOp> ops = {{"fwd.a", 0}, {"fwd.b", 0}, {"fwd.a", 1}, {"optimizer", -1}};
  {
    const NvtxRange step("step 0");
    NvtxMicroBatchRange micro;
    for (const FakeOp& op : ops) {
      micro.enter(op.micro);
      const NvtxRange range(op.name);
    }
  }
  const std::vector<std::string> want = {
      "push moesim step 0",      "push moesim micro-batch 0", "push moesim fwd.a", "pop moesim",
      "push moesim fwd.b",       "pop moesim",                "pop moesim",        "push moesim micro-batch 1",
      "push moesim fwd.a",       "pop moesim",                "pop moesim",        "push moesim optimizer",
      "pop moesim",              "pop moesim"};
  CHECK(recorded().events == want);
}
