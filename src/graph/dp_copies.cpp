// SPDX-License-Identifier: MIT
#include "graph/dp_copies.hpp"

namespace moesim {

GatherCopies fsdp2_gather_copies(const DpPart& part, const DpFormats& f) {
  const double n = static_cast<double>(part.shards);
  const double p = dtype_bytes(f.params);
  const double m = dtype_bytes(f.master);
  GatherCopies c;
  if (part.params <= 0) return c;
  if (f.master != f.params && part.trainable > 0) {
    c.copy_in += CopyBytes{part.trainable / n * m, part.trainable / n * p};
  }
  c.copy_in += CopyBytes{part.params / n * p, part.params / n * p};
  if (part.shards > 1) c.copy_out = CopyBytes{part.params * p, part.params * p};
  return c;
}

ReduceCopies fsdp2_reduce_copies(const DpPart& part, const DpFormats& f, const GradStep& step) {
  ReduceCopies c;
  const double t = part.trainable;
  if (t <= 0) return c;
  const double n = static_cast<double>(part.shards);
  const double p = dtype_bytes(f.params);
  const double r = dtype_bytes(f.grad_reduce);
  const double s = dtype_bytes(f.grads);
  // FSDP2 keeps gradients accumulated without a reduction in the reduction's format when it
  // differs from the parameters' (FSDPParam.to_accumulated_grad_if_needed), else autograd
  // accumulates them in the parameters' format.
  const bool widened = f.grad_reduce != f.params;
  const double a = widened ? r : p;
  const bool accumulating = !step.reduces || step.accumulated_before;
  if (accumulating) {
    if (!step.first_of_step) {
      c.unsharded_accumulate = CopyBytes{t * (a + p), t * a};
    } else if (widened) {
      c.unsharded_accumulate = CopyBytes{t * p, t * r};
    }
  }
  if (!step.reduces) return c;
  c.copy_in = CopyBytes{t * (step.accumulated_before ? a : p), t * r};
  if (part.shards == 1) c.single_rank_copy = CopyBytes{t * r, t * r};
  if (f.grad_reduce != f.grads) c.sharded_update += CopyBytes{t / n * r, t / n * s};
  if (!step.first_of_step && !step.accumulated_before) c.sharded_update += CopyBytes{2 * t / n * s, t / n * s};
  return c;
}

}  // namespace moesim
