#!/bin/bash
# The second call, on the lent H200: the same duty-cycle and mix bench, and the llama8b harness
# trace of one micro-batch (Llama 3.1 8B's kernels on the H200).
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version,temperature.gpu --format=csv > $OUT/machine.txt
mkdir -p $OUT/traces
python3 tools/trace_harness/harness.py --out $OUT/traces --config llama8b:8192:1 2>&1 | tail -1
cd bench
python3 power_duty_reference.py --out $OUT/power_duty.json > $OUT/power_duty.txt 2>&1; tail -30 $OUT/power_duty.txt
