#!/bin/bash
# Why calibrate's GEMMs run slower than the same GEMMs inside a step: SM clock and power sampled
# every 50 ms (nvidia-smi, read-only) while `moesim calibrate` sweeps its GEMMs and while
# `moesim run` executes the 1-GPU slice. GPU 0 only.
export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=build-cuda/dist
exec > >(tee $OUT/log.txt) 2>&1
sample() { nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 50 > $1 & echo $!; }
P=$(sample $OUT/clocks-calibrate.csv)
timeout 200 $B/moesim calibrate --out /tmp/c.json > /tmp/c.txt 2> $OUT/calibrate-log.txt; echo "calibrate rc=$?"
kill $P
P=$(sample $OUT/clocks-run.csv)
timeout 100 $B/moesim run scenarios/calibration/k3-slice-1gpu.json --steps 5 > /tmp/r.txt 2>&1; echo "run rc=$?"
kill $P
head -3 /tmp/r.txt
grep -B1 -A6 "GEMM (bf16" /tmp/c.txt | head -12
wc -l $OUT/*.csv
