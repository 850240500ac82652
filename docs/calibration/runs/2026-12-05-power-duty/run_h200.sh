#!/bin/bash
# The second call, asked of the lent nvidia-h200 kind: the same duty-cycle and mix bench, and the
# llama8b harness trace of one micro-batch. The machine that ran it was an H100 80GB HBM3 (the kind
# may be served by one): its output is h100-run2/, a repeat of run.sh's measurements.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version,temperature.gpu --format=csv > $OUT/machine.txt
mkdir -p $OUT/traces
python3 tools/trace_harness/harness.py --out $OUT/traces --config llama8b:8192:1 2>&1 | tail -1
cd bench
python3 power_duty_reference.py --out $OUT/power_duty.json > $OUT/power_duty.txt 2>&1; tail -30 $OUT/power_duty.txt
