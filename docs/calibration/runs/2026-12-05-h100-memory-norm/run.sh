#!/usr/bin/env bash
# One call on an H100: (1) bench/memory_bound_reference.py with calls timed back to back (the
# 2026-12-05-h100-kernels run timed each call alone, counting the host's launch gap); (2) the
# llama8b harness step with nn.RMSNorm as PyTorch 2.4-2.7 computed it (--rms-norm composite), the
# form of the end-2024 torchtitan runs of the published suite, traced for validate --from-trace.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p $OUT/traces
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/machine.txt
cat $OUT/machine.txt
PEAK=3.35e12; grep -q H200 $OUT/machine.txt && PEAK=4.8e12
(cd bench && timeout 200 python3 memory_bound_reference.py --peak-bytes-per-s $PEAK --out $OUT/memory_bound.json > $OUT/memory_bound.txt 2>&1)
cat $OUT/memory_bound.txt
for c in "llama8b:8192:1" "llama8b:8192:2:full"; do
  timeout 150 python3 tools/trace_harness/harness.py --out $OUT/traces --config $c --rms-norm composite 2>&1 | tail -1
done
ls -la $OUT/traces
