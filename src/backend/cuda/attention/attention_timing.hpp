// SPDX-License-Identifier: MIT
// Timing of the attention kernels at a given shape, for the calibrator and attention_bench:
// allocates two sets of random, non-zero inputs (alternated between repeats, so inputs larger
// than L2 come from HBM), and times them by timer.hpp's convention (warm-ups, then the median of
// repeats each between its own pair of CUDA events) with the kernel's cost record. Runs on the current device and the default stream; throws BackendError.
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/attention/dsa.hpp"
#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/attention/mla_attention.hpp"
#include "backend/cuda/attention/sdpa.hpp"

namespace moesim::cuda {

struct KernelTiming {
  std::string name;   // e.g. "kda_forward"
  std::string shape;  // human-readable
  double ms = 0;      // median
  KernelCost cost;
};

struct TimingOptions {
  int warmup = 2;
  int repeats = 5;
};

// kda_forward, kda_backward and kda_fwd_bwd (a forward then a backward per repeat, as a training step
// runs them).
std::vector<KernelTiming> time_kda(const KdaShape& s, const TimingOptions& opt = {});
// mla_forward, mla_backward (tensor cores), then the same with suffix _simt.
std::vector<KernelTiming> time_mla(const MlaShape& s, const TimingOptions& opt = {});
// cuDNN SDPA: <label>_forward, <label>_backward and <label>_fwd_bwd (a forward then a backward per
// repeat, what a training step runs and what PyTorch's SDPA benchmarks time). The first warm-up
// call builds the plans. Throws BackendError without cuDNN.
std::vector<KernelTiming> time_sdpa(const SdpaShape& s, const std::string& label, const TimingOptions& opt = {});
// dsa_indexer, dsa_indexer_backward, dsa_topk, dsa_sparse_forward, dsa_sparse_backward (the sparse
// kernels run on the indices the indexer and top-k produced).
std::vector<KernelTiming> time_dsa(const DsaIndexerShape& ix, const DsaAttentionShape& at,
                                   const TimingOptions& opt = {});

}  // namespace moesim::cuda
