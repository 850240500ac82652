// SPDX-License-Identifier: MIT
// NCCL over the local GPUs of one process: one communicator per GPU from ncclCommInitAll, one
// stream each, and one host thread that issues each collective on every rank inside
// ncclGroupStart/ncclGroupEnd (NCCL's single-thread, multi-GPU pattern). Sizes follow
// nccl-tests: `count` is elements. Only API present in NCCL 2.28.3 (the GPU machine's) is used;
// all-to-all(v) is grouped ncclSend/ncclRecv.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

namespace moesim::cuda {

class NcclGroup {
 public:
  explicit NcclGroup(std::vector<int> devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_[static_cast<size_t>(rank)]; }
  cudaStream_t stream(int rank) const { return streams_[static_cast<size_t>(rank)]; }
  // The rank's communicator, for callers that issue NCCL calls of their own (calibrate issues
  // every kind through one function for this group and for one-rank-per-process communicators).
  ncclComm_t comm(int rank) const { return comms_[static_cast<size_t>(rank)]; }

  // One buffer pointer per rank. all_gather: recv[r] holds size() * count elements, rank i's
  // send at i * count. reduce_scatter: send[r] holds size() * count, recv[r] gets block r of the
  // sum. all_reduce: sum of count elements (in place allowed).
  void all_gather(std::span<const void* const> send, std::span<void* const> recv, size_t count, ncclDataType_t type);
  void reduce_scatter(std::span<const void* const> send, std::span<void* const> recv, size_t count,
                      ncclDataType_t type);
  void all_reduce(std::span<const void* const> send, std::span<void* const> recv, size_t count, ncclDataType_t type);
  // send_counts[r][p]: elements rank r sends to rank p, packed in send[r] in peer order; rank p
  // receives them in recv[p] packed in source order (the MoE dispatch/combine exchange).
  void all_to_all_v(std::span<const void* const> send, std::span<void* const> recv,
                    const std::vector<std::vector<size_t>>& send_counts, ncclDataType_t type);
  void synchronize() const;

 private:
  void check_ranks(size_t a, size_t b) const;

  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
};

size_t nccl_type_bytes(ncclDataType_t type);

}  // namespace moesim::cuda
