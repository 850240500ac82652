// SPDX-License-Identifier: MIT
// The matching rules of a profiler trace against a scenario's op graph, in one table each: how a
// GPU kernel's name classifies it, and how the record_function range a kernel was launched in
// names the op it belongs to. docs/calibration/from-trace.md prints the same tables; a test
// (tests/trace/test_trace.cpp) checks that the page and these tables agree, row for row.
//
// A kernel is attributed in this order:
//   1. communication kernels (the nccl rows below) go to the scenario's collectives of their kind,
//      in issue order, whatever range launched them;
//   2. every other kernel goes to the innermost record_function range on the launching thread
//      (found through the kernel's correlation id and its launch), read by kRangeRules;
//   3. kernels without a launch record, or launched outside every step, are reported unmatched.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "trace/kineto_trace.hpp"

namespace moesim {

enum class KernelClass : uint8_t {
  gemm,
  grouped_gemm,
  attention,
  norm,
  elementwise,
  copy,   // memcpy (gpu_memcpy activities and copy kernels)
  memset,
  all_gather,
  reduce_scatter,
  all_reduce,
  all_to_all,
  send_recv,   // NCCL's SendRecv kernel: all_to_all_single, batched send/recv
  other_comm,  // broadcast, reduce, ...
  other,
};

constexpr bool is_comm(KernelClass c) {
  return c == KernelClass::all_gather || c == KernelClass::reduce_scatter || c == KernelClass::all_reduce ||
         c == KernelClass::all_to_all || c == KernelClass::send_recv || c == KernelClass::other_comm;
}

std::string_view kernel_class_name(KernelClass c);

// Kernel-name rules: case-insensitive glob patterns ('*' any run of characters), the first
// matching row wins. gpu_memcpy and gpu_memset activities are copy / memset whatever their name.
struct KernelRule {
  std::string_view pattern;
  KernelClass cls;
  std::string_view example;  // a kernel name the row is for (seen in PyTorch 2.11 traces on H200)
};

inline constexpr std::array<KernelRule, 24> kKernelRules{{
    {"*nccl*allgather*", KernelClass::all_gather, "ncclDevKernel_AllGather_RING_LL"},
    {"*nccl*reducescatter*", KernelClass::reduce_scatter, "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"},
    {"*nccl*allreduce*", KernelClass::all_reduce, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"},
    {"*nccl*alltoall*", KernelClass::all_to_all, "ncclDevKernel_AllToAll"},
    {"*nccl*sendrecv*", KernelClass::send_recv, "ncclDevKernel_SendRecv"},
    {"*nccl*", KernelClass::other_comm, "ncclDevKernel_Broadcast_RING_LL"},
    {"*grouped_gemm*", KernelClass::grouped_gemm, "at::cuda::detail::prepare_grouped_gemm_data<...>"},
    {"*cutlass*groupproblemshape*", KernelClass::grouped_gemm, "cutlass::device_kernel<...GemmUniversal<GroupProblemShape<...>>> (torch._grouped_mm)"},
    {"*fmha*", KernelClass::attention, "cudnn::fusion::fmha_reduce_head<true>"},
    {"*sdpa*", KernelClass::attention, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_..."},
    {"*flash*", KernelClass::attention, "pytorch_flash::flash_fwd_kernel<...>"},
    {"*cudnn::fusion::*", KernelClass::attention, "cudnn::fusion::compute_dot_do_o_specialized<true, 128>"},
    {"*nvjet*", KernelClass::gemm, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"},
    {"*gemm*", KernelClass::gemm, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_..."},
    {"*xmma*", KernelClass::gemm, "sm90_xmma_..."},
    {"*cutlass*", KernelClass::gemm, "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_...>"},
    {"*splitkreduce*", KernelClass::gemm, "cublasLt::splitKreduce_kernel<32, 16, int, float, ...>"},
    {"*layer_norm*", KernelClass::norm, "at::native::(anonymous namespace)::vectorized_layer_norm_kernel<...>"},
    {"*rms*norm*", KernelClass::norm, "at::native::(anonymous namespace)::rms_norm_kernel<...>"},
    {"*gammabetabackward*", KernelClass::norm, "at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<...>"},
    {"*memcpy*", KernelClass::copy, "Memcpy DtoD (Device -> Device)"},
    {"*copy*", KernelClass::copy, "at::native::(anonymous namespace)::CatArrayBatchedCopy<...>"},
    {"*elementwise*", KernelClass::elementwise, "at::native::vectorized_elementwise_kernel<8, ...>"},
    {"*reduce_kernel*", KernelClass::elementwise, "at::native::reduce_kernel<512, 1, at::native::ReduceOp<...>>"},
}};
// Anything else is `other` (sorts, scans, top-k, gathers, softmax, the optimizer's
// multi_tensor_apply): kernels of an op's range count for that op whatever their class.

KernelClass classify_kernel(std::string_view name, GpuActivity activity);
bool glob_match(std::string_view pattern, std::string_view text);  // case-insensitive, '*' only

// What the innermost record_function range around a kernel's launch makes of it.
enum class RangeMeaning : uint8_t {
  op,           // the name of an op of the rank's program ("layer3.attn.q_proj", "...q_proj.bwd")
  optimizer,    // every optimizer op of the program together (one optimizer.step() updates all)
  data_parallel,  // FSDP2's hooks: the program's copy and accumulation ops of the same side together
  framework,    // the training framework's own work: no op of the scenario (FSDP2's copy-in, casts)
  step,         // only the profiler step encloses it: launched outside every annotated range
  unknown,      // a range that names no op of the scenario (reported with its name)
};

struct RangeRule {
  std::string_view pattern;  // glob, case-sensitive here: range names are the graph's op names
  RangeMeaning meaning;
  std::string_view doc;
};

// Read after the exact op-name lookup: a range whose name is an op of the program is that op.
inline constexpr std::array<RangeRule, 6> kRangeRules{{
    {"optimizer", RangeMeaning::optimizer, "the harness's range around optimizer.step(): all `*.adamw` ops"},
    {"Optimizer.step#*", RangeMeaning::optimizer, "PyTorch's own range around an optimizer's step()"},
    {"FSDP::post_backward*", RangeMeaning::data_parallel,
     "FSDP2's gradient hooks: all `fsdp_reduce_*` and `fsdp_accumulate_*` ops"},
    {"FSDP::*", RangeMeaning::data_parallel, "FSDP2's parameter hooks: all `fsdp_copy_in` and `fsdp_copy_out` ops"},
    {"Optimizer.zero_grad#*", RangeMeaning::framework, "zeroing gradients (no op of the scenario)"},
    {"ProfilerStep#*", RangeMeaning::step, "the profiler's step: the kernel is in no narrower range"},
}};

RangeMeaning range_meaning(std::string_view range_name);  // for a name that is no op of the program

}  // namespace moesim
