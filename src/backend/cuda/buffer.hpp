// SPDX-License-Identifier: MIT
// Owning device and pinned-host buffers (RAII, move-only). Element type T is a plain type of the
// same size as the device type (BF16 as bf16_bits, bf16.hpp).
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "backend/cuda/check.hpp"

namespace moesim::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0) MOESIM_CUDA_CHECK(cudaMalloc(&ptr_, count * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) (void)cudaFree(ptr_);  // no throw from a destructor
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void upload(std::span<const T> host) {
    if (host.size() != count_) throw BackendError("upload: size mismatch");
    MOESIM_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> out(count_);
    MOESIM_CUDA_CHECK(cudaMemcpy(out.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
  // Fills every byte with `byte` (0xFF makes BF16 and FP32 NaNs: outputs are poisoned before runs).
  void fill_bytes(int byte) { MOESIM_CUDA_CHECK(cudaMemset(ptr_, byte, bytes())); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

template <class T>
DeviceBuffer<T> to_device(std::span<const T> host) {
  DeviceBuffer<T> d(host.size());
  d.upload(host);
  return d;
}
template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  return to_device(std::span<const T>(host));
}

// Page-locked host memory: the target of swap copies, and what makes cudaMemcpyAsync asynchronous.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t count) : count_(count) {
    if (count > 0) MOESIM_CUDA_CHECK(cudaMallocHost(&ptr_, count * sizeof(T)));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~PinnedBuffer() {
    if (ptr_) (void)cudaFreeHost(ptr_);
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  std::span<T> span() { return {ptr_, count_}; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace moesim::cuda
