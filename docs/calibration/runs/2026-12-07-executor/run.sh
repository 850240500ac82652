#!/usr/bin/env bash
# One call on the lent H100 (2026-12-07): the executor calibrated on this H100 (moesim calibrate,
# the full grid) with its expert GEMMs choosing between the loop and cuBLAS's grouped GEMM, then
# the seven 1-GPU calibration scenarios validated against that calibration, as on 2026-12-06
# (runs/2026-12-06-h100/run2.sh), so that the two runs compare. From the repository root, with
# build-gpubin/ carried. On an H200 the base is h200-x2 (h200-x1-executor.json), to compare with
# the shipped H200 calibration's validation (docs/calibration/validation.md).
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-build-gpubin}
R=docs/calibration/runs/2026-12-07-executor
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt
GPU=h100; grep -q H200 $OUT/gpu.txt && GPU=h200  # an H200 when no H100 is lent: its own base file
timeout 300 $B/moesim calibrate --out $R/$GPU-executor.json > $OUT/calibrate.log 2>&1; echo "calibrate rc=$? at $(( $(date +%s) - START )) s"
cp $R/$GPU-executor.json $OUT/ || exit 1
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu k3-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu-pad k3-slice-1gpu-selective k3-slice-1gpu-seq12k; do
  timeout 100 $B/moesim validate scenarios/calibration/$s.json --hardware $R/$GPU-x1-executor.json --json > $OUT/validate-$s.json 2> $OUT/validate-$s.err
  echo "$s rc=$? at $(( $(date +%s) - START )) s"
done
