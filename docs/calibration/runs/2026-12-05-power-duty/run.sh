#!/bin/bash
# One device call: the machine, the llama8b harness traces (Llama 3.1 8B's kernels as torchtitan's
# eager step runs them), the duty-cycle and mix bench, and the clock-power curve of this GPU.
# Run from the repository root on the lent machine; everything lands in $OUT.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version,temperature.gpu --format=csv > $OUT/machine.txt
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" >> $OUT/machine.txt
mkdir -p $OUT/traces
python3 tools/trace_harness/harness.py --out $OUT/traces --config llama8b:8192:1 --config llama8b:8192:2 \
    --config llama8b:8192:2:full 2>&1 | tail -5
cd bench
python3 power_duty_reference.py --out $OUT/power_duty.json > $OUT/power_duty.txt 2>&1; tail -30 $OUT/power_duty.txt
python3 power_clock_reference.py --seconds 4 --data random --out $OUT/power_clock.json > $OUT/power_clock.txt 2>&1
tail -20 $OUT/power_clock.txt
