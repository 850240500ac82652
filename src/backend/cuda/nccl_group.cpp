// SPDX-License-Identifier: MIT
#include "backend/cuda/nccl_group.hpp"

#include "backend/cuda/check.hpp"

namespace moesim::cuda {

size_t nccl_type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: throw BackendError("nccl_type_bytes: unsupported type");
  }
}

NcclGroup::NcclGroup(std::vector<int> devices) : devices_(std::move(devices)) {
  if (devices_.empty()) throw BackendError("NcclGroup: no devices");
  comms_.resize(devices_.size());
  MOESIM_NCCL_CHECK(ncclCommInitAll(comms_.data(), size(), devices_.data()));
  streams_.resize(devices_.size());
  for (int r = 0; r < size(); ++r) {
    MOESIM_CUDA_CHECK(cudaSetDevice(device(r)));
    MOESIM_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[static_cast<size_t>(r)], cudaStreamNonBlocking));
  }
}

NcclGroup::~NcclGroup() {
  for (size_t r = 0; r < devices_.size(); ++r) {
    (void)cudaSetDevice(devices_[r]);
    if (streams_.size() > r && streams_[r]) (void)cudaStreamSynchronize(streams_[r]);
    if (comms_[r]) (void)ncclCommDestroy(comms_[r]);
    if (streams_.size() > r && streams_[r]) (void)cudaStreamDestroy(streams_[r]);
  }
}

void NcclGroup::check_ranks(size_t a, size_t b) const {
  if (a != devices_.size() || b != devices_.size()) throw BackendError("NcclGroup: one buffer per rank expected");
}

void NcclGroup::all_gather(std::span<const void* const> send, std::span<void* const> recv, size_t count,
                           ncclDataType_t type) {
  check_ranks(send.size(), recv.size());
  MOESIM_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size(); ++r) {
    MOESIM_NCCL_CHECK(ncclAllGather(send[r], recv[r], count, type, comms_[r], streams_[r]));
  }
  MOESIM_NCCL_CHECK(ncclGroupEnd());
}

void NcclGroup::reduce_scatter(std::span<const void* const> send, std::span<void* const> recv, size_t count,
                               ncclDataType_t type) {
  check_ranks(send.size(), recv.size());
  MOESIM_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size(); ++r) {
    MOESIM_NCCL_CHECK(ncclReduceScatter(send[r], recv[r], count, type, ncclSum, comms_[r], streams_[r]));
  }
  MOESIM_NCCL_CHECK(ncclGroupEnd());
}

void NcclGroup::all_reduce(std::span<const void* const> send, std::span<void* const> recv, size_t count,
                           ncclDataType_t type) {
  check_ranks(send.size(), recv.size());
  MOESIM_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size(); ++r) {
    MOESIM_NCCL_CHECK(ncclAllReduce(send[r], recv[r], count, type, ncclSum, comms_[r], streams_[r]));
  }
  MOESIM_NCCL_CHECK(ncclGroupEnd());
}

void NcclGroup::all_to_all_v(std::span<const void* const> send, std::span<void* const> recv,
                             const std::vector<std::vector<size_t>>& send_counts, ncclDataType_t type) {
  check_ranks(send.size(), recv.size());
  const size_t n = devices_.size();
  if (send_counts.size() != n) throw BackendError("all_to_all_v: send_counts must have one row per rank");
  for (const auto& row : send_counts) {
    if (row.size() != n) throw BackendError("all_to_all_v: send_counts must be square");
  }
  const size_t elem = nccl_type_bytes(type);
  MOESIM_NCCL_CHECK(ncclGroupStart());
  for (size_t r = 0; r < n; ++r) {
    size_t send_off = 0;
    size_t recv_off = 0;
    for (size_t p = 0; p < n; ++p) {
      const size_t out = send_counts[r][p];
      const size_t in = send_counts[p][r];
      // Zero-count sends and receives are legal in NCCL and keep the pattern uniform.
      MOESIM_NCCL_CHECK(ncclSend(static_cast<const char*>(send[r]) + send_off * elem, out, type, static_cast<int>(p),
                                 comms_[r], streams_[r]));
      MOESIM_NCCL_CHECK(ncclRecv(static_cast<char*>(recv[r]) + recv_off * elem, in, type, static_cast<int>(p), comms_[r],
                                 streams_[r]));
      send_off += out;
      recv_off += in;
    }
  }
  MOESIM_NCCL_CHECK(ncclGroupEnd());
}

void NcclGroup::synchronize() const {
  for (int r = 0; r < size(); ++r) {
    MOESIM_CUDA_CHECK(cudaSetDevice(device(r)));
    MOESIM_CUDA_CHECK(cudaStreamSynchronize(streams_[static_cast<size_t>(r)]));
  }
}

}  // namespace moesim::cuda
