#!/usr/bin/env bash
# One device call: bench/power_window_reference.py, the GEMM burst's per-call rate after idle or
# memory-bound stretches of 0-400 ms (the power controller's memory), for a clock per window of
# the step in place of one per step (docs/hardware-efficiency.md, "What the model leaves out: time").
set -u
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
python3 bench/power_window_reference.py --out $OUT/power_window.json 2>&1 | tee $OUT/power_window.txt
