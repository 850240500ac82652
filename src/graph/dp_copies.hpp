// SPDX-License-Identifier: MIT
// What PyTorch FSDP2 copies around its collectives, per unit and micro-batch: the HBM traffic of
// the casts and copies that are no collective and no layer op, but run on the GPU every step.
//
// Read from torch/distributed/fsdp/_fully_shard/ (_fsdp_collectives.py, _fsdp_param_group.py,
// _fsdp_param.py) and checked against the kernels of tests/data/traces/ (docs/modelling.md,
// "FSDP2's copies and gradient accumulation"). Per part of a unit (N parameters on this rank
// before sharding, T of them trainable, sharded over n ranks), with p, m, r, s the bytes per
// element of the gathered parameters, the fp32 master, the reduction and the sharded gradients:
//
//   all-gather copy-in    the trainable shard cast from the master format (T/n: read m, write p;
//                         only when m != p), then the whole shard copied into the all-gather
//                         input (N/n: read p, write p). With n = 1 there is no collective and the
//                         same two copies fill the unsharded parameter.
//   all-gather copy-out   n > 1: the gathered buffer split into the parameters (N: read p, write p)
//   reduce copy-in        the unsharded gradients concatenated (and widened) into the
//                         reduce-scatter input (T: read a, write r), a = the gradients' format:
//                         p, or r when they were accumulated in r over earlier micro-batches
//   single-rank copy      n = 1: the input copied to the output instead of a reduce-scatter
//                         (T: read r, write r)
//   sharded cast          r != s: the reduced shard cast to the gradients' format (T/n: r -> s)
//   sharded accumulate    the reduced shard added to the shard gradient an earlier micro-batch
//                         of the step left (T/n: read 2s, write s)
//   unsharded accumulate  micro-batches that do not reduce (gradient_sync last_micro_batch): the
//                         first casts its gradients to r when r != p (T: read p, write r); each
//                         later one adds its gradients to them (T: read a + p, write a)
//
// Everything scales with the parameters and micro-batches, not with the tokens: in the traces of
// the one-GPU slices they are 4-20% of the GPU's busy time, the most at 4,096 tokens per
// micro-batch (docs/calibration/from-trace.md).
#pragma once

#include "core/dtype.hpp"

namespace moesim {

// HBM bytes of one copy (zero: no kernel).
struct CopyBytes {
  double read = 0;
  double written = 0;
  bool empty() const { return read <= 0 && written <= 0; }
  CopyBytes& operator+=(const CopyBytes& o) {
    read += o.read;
    written += o.written;
    return *this;
  }
};

// The formats a unit's parameters and gradients pass through (PrecisionSpec's).
struct DpFormats {
  Dtype params = Dtype::bf16;       // gathered, and the gradients autograd computes
  Dtype master = Dtype::fp32;       // the sharded trainable weights
  Dtype grad_reduce = Dtype::fp32;  // the reduction's input and output
  Dtype grads = Dtype::fp32;        // the sharded gradients the optimizer reads
};

// One part of a unit as FSDP2 shards it.
struct DpPart {
  double params = 0;     // N: before sharding
  double trainable = 0;  // T, of params
  int64_t shards = 1;    // n
};

// The copies of one all-gather (FSDP2's unshard of a part).
struct GatherCopies {
  CopyBytes copy_in;   // cast + copy into the all-gather input (or the unsharded parameter, n = 1)
  CopyBytes copy_out;  // split into the parameters; empty when n = 1
};
GatherCopies fsdp2_gather_copies(const DpPart& part, const DpFormats& f);

// How a micro-batch's backward treats a part's gradients.
struct GradStep {
  bool reduces = true;             // this micro-batch reduces (else it accumulates unsharded)
  bool first_of_step = true;       // no earlier micro-batch of the step has gradients yet
  bool accumulated_before = false; // reduces: earlier micro-batches left unsharded gradients (no sync)
};

// The copies of one micro-batch's gradient handling of a part.
struct ReduceCopies {
  CopyBytes unsharded_accumulate;  // no-sync accumulation (or the cast that starts it)
  CopyBytes copy_in;               // into the reduce-scatter input
  CopyBytes single_rank_copy;      // n = 1: in place of the reduce-scatter
  CopyBytes sharded_update;        // cast and accumulation of the reduced shard
};
ReduceCopies fsdp2_reduce_copies(const DpPart& part, const DpFormats& f, const GradStep& step);

}  // namespace moesim
