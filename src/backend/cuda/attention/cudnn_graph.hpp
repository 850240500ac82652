// SPDX-License-Identifier: MIT
// A small C++ layer over cuDNN 9's backend (graph) API: owning descriptors, a builder that turns
// tensors and operations (matmul, pointwise, reduction, reshape) into an operation graph, and the
// execution plan cuDNN's heuristics pick for it. Used by sdpa.cpp; nothing here knows attention.
//
// The backend API in one paragraph: every object is an opaque descriptor of some type, filled
// attribute by attribute and then finalised (validated, frozen). Tensors carry a unique id (the
// key under which a device pointer is bound at execution), dims, strides, a data type, and may be
// virtual (an intermediate the engine never writes to memory) or by-value (a host scalar). An
// operation graph of finalised operations goes to the heuristics (mode A: a model of the device
// ranks the engine configurations that support the graph); the first configuration whose execution
// plan finalises is the plan, and the plan says how much workspace it needs. Execution binds ids
// to pointers in a variant pack.
//
// Caveats: a graph is matched against cuDNN's fused engines by its shape, so the order and types of
// the operations matter (sdpa.cpp follows the pattern cuDNN's runtime-compiled attention engine
// recognises); descriptors are not thread-safe; a plan belongs to the device current at build time.
#pragma once

#include <cudnn_backend.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace moesim::cuda::cudnn {

// An owning backend descriptor (move-only).
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor& operator=(Descriptor&& o) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set_int64(cudnnBackendAttributeName_t name, int64_t v) { set(name, CUDNN_TYPE_INT64, 1, &v); }
  void set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t v) { set(name, CUDNN_TYPE_DATA_TYPE, 1, &v); }
  void set_desc(cudnnBackendAttributeName_t name, const Descriptor& v) {
    cudnnBackendDescriptor_t raw = v.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::vector<int64_t>;

// A tensor of a graph under construction: an index into the builder's tensors.
struct TensorRef {
  size_t index = 0;
};

// An execution plan with everything it references kept alive.
class Plan {
 public:
  size_t workspace_bytes() const { return workspace_bytes_; }
  int64_t engine_index() const { return engine_index_; }  // cuDNN's global engine index (for logs)
  // Binds `ptrs[i]` to tensor id `uids[i]` (device pointers; host pointers for by-value scalars)
  // and enqueues the plan on the handle's stream. `workspace` holds workspace_bytes().
  void execute(cudnnHandle_t handle, std::span<const int64_t> uids, std::span<void* const> ptrs,
               void* workspace) const;

 private:
  friend class GraphBuilder;
  std::vector<std::shared_ptr<Descriptor>> keep_;  // tensors, operations, the graph, the chosen config
  std::shared_ptr<Descriptor> plan_;
  size_t workspace_bytes_ = 0;
  int64_t engine_index_ = -1;
};

class GraphBuilder {
 public:
  // A tensor in device memory, bound at execution under `uid` (16-byte aligned).
  TensorRef io(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type);
  // An FP32 host scalar passed by value, bound at execution under `uid` (a pointer to a float).
  TensorRef scalar(int64_t uid);
  // An intermediate that lives only inside the fused kernel.
  TensorRef virt(Dims dims, Dims strides, cudnnDataType_t type);
  const Dims& dims(TensorRef t) const { return tensors_[t.index].dims; }
  const Dims& strides(TensorRef t) const { return tensors_[t.index].strides; }

  // c = a @ b over the last two dims, batch dims broadcast (a [.., m, k], b [.., k, n]).
  void matmul(TensorRef a, TensorRef b, TensorRef c);
  // y = mode(x [, b [, t]]), computed in `math`; `axis` for GEN_INDEX. Binary select: y = t ? x : b.
  void pointwise(cudnnPointwiseMode_t mode, TensorRef x, TensorRef y, cudnnDataType_t math = CUDNN_DATA_FLOAT,
                 std::optional<TensorRef> b = std::nullopt, std::optional<TensorRef> t = std::nullopt,
                 std::optional<int64_t> axis = std::nullopt);
  // y = reduce(x) over the dims where y has extent 1 and x does not (or a grouped sum where y's
  // extent divides x's), FP32.
  void reduction(cudnnReduceTensorOp_t op, TensorRef x, TensorRef y);
  // y = x with other dims / strides over the same elements (a transpose view).
  void reshape(TensorRef x, TensorRef y);

  // Finalises the operation graph, asks the heuristics (mode A, then the fallback list) and keeps
  // the first configuration whose plan finalises. Throws BackendError naming `what` when no
  // engine supports the graph. The builder is consumed.
  Plan build(cudnnHandle_t handle, const std::string& what);

 private:
  struct Tensor {
    std::shared_ptr<Descriptor> desc;
    Dims dims, strides;
  };
  TensorRef add(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type, bool is_virtual, bool by_value);
  const Descriptor& desc(TensorRef t) const { return *tensors_[t.index].desc; }

  std::vector<Tensor> tensors_;
  std::vector<std::shared_ptr<Descriptor>> ops_;
  std::vector<std::shared_ptr<Descriptor>> keep_;  // operation sub-descriptors (matmul, pointwise, reduction)
  int64_t next_virtual_uid_ = 1 << 20;               // virtual ids, far from the caller's io ids
};

}  // namespace moesim::cuda::cudnn
