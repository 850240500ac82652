#!/usr/bin/env bash
# One call on an H100: the llama8b harness steps again with torchtitan's w1 and w3 in ranges of
# their own (gate_proj, up_proj), as the scenarios now state them (fused_ops.gate_up apart): eager
# with ATen's RMSNorm kernel and with PyTorch 2.4-2.7's composite nn.RMSNorm, one micro-batch and
# two with full recompute. The earlier traces ran both GEMMs in one up_proj range.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p $OUT/traces
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/machine.txt
cat $OUT/machine.txt
for norm in kernel composite; do
  for c in "llama8b:8192:1" "llama8b:8192:2:full"; do
    timeout 150 python3 tools/trace_harness/harness.py --out $OUT/traces --config $c --rms-norm $norm 2>&1 | tail -1
  done
done
ls -la $OUT/traces
