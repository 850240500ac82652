// SPDX-License-Identifier: MIT
// cuDNN backend descriptors, graph builder and plans; see cudnn_graph.hpp.
#include "backend/cuda/attention/cudnn_graph.hpp"

#include <utility>

#include "backend/cuda/attention/cudnn_lib.hpp"
#include "backend/cuda/check.hpp"

namespace moesim::cuda::cudnn {

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  MOESIM_CUDNN_CHECK(api().backend_create_descriptor(type, &d_));
}

Descriptor::~Descriptor() {
  if (d_ != nullptr) (void)api().backend_destroy_descriptor(d_);
}

Descriptor& Descriptor::operator=(Descriptor&& o) noexcept {
  if (this != &o) {
    if (d_ != nullptr) (void)api().backend_destroy_descriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                     const void* values) {
  MOESIM_CUDNN_CHECK(api().backend_set_attribute(d_, name, type, count, values));
}

void Descriptor::finalize() { MOESIM_CUDNN_CHECK(api().backend_finalize(d_)); }

TensorRef GraphBuilder::add(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type, bool is_virtual,
                            bool by_value) {
  if (dims.size() != strides.size()) throw BackendError("cuDNN graph: tensor dims and strides differ in rank");
  auto d = std::make_shared<Descriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d->set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, type);
  d->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data());
  d->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data());
  d->set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
  d->set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  d->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  d->finalize();
  tensors_.push_back(Tensor{std::move(d), std::move(dims), std::move(strides)});
  return TensorRef{tensors_.size() - 1};
}

TensorRef GraphBuilder::io(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type) {
  return add(uid, std::move(dims), std::move(strides), type, false, false);
}

TensorRef GraphBuilder::scalar(int64_t uid) {
  return add(uid, Dims{1, 1, 1, 1}, Dims{1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true);
}

TensorRef GraphBuilder::virt(Dims dims, Dims strides, cudnnDataType_t type) {
  return add(next_virtual_uid_++, std::move(dims), std::move(strides), type, true, false);
}

void GraphBuilder::matmul(TensorRef a, TensorRef b, TensorRef c) {
  auto m = std::make_shared<Descriptor>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  m->set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
  m->finalize();
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, desc(a));
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, desc(b));
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, desc(c));
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *m);
  op->finalize();
  keep_.push_back(std::move(m));
  ops_.push_back(std::move(op));
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, TensorRef x, TensorRef y, cudnnDataType_t math,
                             std::optional<TensorRef> b, std::optional<TensorRef> t, std::optional<int64_t> axis) {
  auto pw = std::make_shared<Descriptor>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw->set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, math);
  if (axis) pw->set_int64(CUDNN_ATTR_POINTWISE_AXIS, *axis);
  pw->finalize();
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw);
  op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, desc(x));
  if (b) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, desc(*b));
  if (t) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, desc(*t));
  op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, desc(y));
  const float one = 1.0f;
  op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  op->finalize();
  keep_.push_back(std::move(pw));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t op_kind, TensorRef x, TensorRef y) {
  auto r = std::make_shared<Descriptor>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r->set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
  r->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_kind);
  r->finalize();
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, desc(x));
  op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, desc(y));
  op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *r);
  op->finalize();
  keep_.push_back(std::move(r));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reshape(TensorRef x, TensorRef y) {
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, desc(x));
  op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, desc(y));
  op->finalize();
  ops_.push_back(std::move(op));
}

namespace {

// The engine configurations the heuristics rank for `graph` in `mode` (best first; may be empty).
std::vector<std::shared_ptr<Descriptor>> engine_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (api().backend_finalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  MOESIM_CUDNN_CHECK(api().backend_get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<std::shared_ptr<Descriptor>> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.push_back(std::make_shared<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfgs.back()->get());
  }
  int64_t got = 0;
  if (count > 0) {
    MOESIM_CUDNN_CHECK(api().backend_get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  }
  cfgs.resize(static_cast<size_t>(got));
  return cfgs;
}

int64_t engine_index_of(const Descriptor& cfg) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0, index = -1;
  if (api().backend_get_attribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                  &raw) != CUDNN_STATUS_SUCCESS) {
    return -1;
  }
  if (api().backend_get_attribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
      CUDNN_STATUS_SUCCESS) {
    return -1;
  }
  return index;
}

}  // namespace

Plan GraphBuilder::build(cudnnHandle_t handle, const std::string& what) {
  auto graph = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> raw_ops;
  for (const auto& op : ops_) raw_ops.push_back(op->get());
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw_ops.size()),
             raw_ops.data());
  graph->finalize();

  Plan p;
  std::string last_error;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (auto& cfg : engine_configs(*graph, mode)) {
      auto plan = std::make_shared<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfg);
      if (api().backend_finalize(plan->get()) != CUDNN_STATUS_SUCCESS) {
        char msg[512] = {};
        api().get_last_error_string(msg, sizeof msg);
        last_error = msg;
        continue;  // this configuration does not support the graph: try the next
      }
      int64_t ws = 0, n = 0;
      MOESIM_CUDNN_CHECK(api().backend_get_attribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                     CUDNN_TYPE_INT64, 1, &n, &ws));
      p.workspace_bytes_ = static_cast<size_t>(ws);
      p.engine_index_ = engine_index_of(*cfg);
      p.plan_ = std::move(plan);
      p.keep_ = std::move(keep_);
      for (auto& t : tensors_) p.keep_.push_back(std::move(t.desc));
      for (auto& op : ops_) p.keep_.push_back(std::move(op));
      p.keep_.push_back(std::move(graph));
      p.keep_.push_back(std::move(cfg));
      return p;
    }
  }
  throw BackendError("cuDNN " + std::to_string(api().version) + " has no engine for " + what +
                     (last_error.empty() ? std::string() : " (last error: " + last_error + ")"));
}

void Plan::execute(cudnnHandle_t handle, std::span<const int64_t> uids, std::span<void* const> ptrs,
                   void* workspace) const {
  if (uids.size() != ptrs.size()) throw BackendError("cuDNN plan: one pointer per tensor id");
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  MOESIM_CUDNN_CHECK(api().backend_execute(handle, plan_->get(), pack.get()));
}

}  // namespace moesim::cuda::cudnn
