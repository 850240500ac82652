#!/usr/bin/env bash
# Second call on the lent H100 (2026-12-06): the executor calibrated on this H100 (moesim calibrate,
# the full grid), then the seven 1-GPU calibration scenarios validated against that calibration
# (h100-x1-executor.json: h100-hgx's device, power and curves with the calibration in place of the
# curves it covers); and the two scenarios with cuDNN attention validated against h100-hgx itself
# with its cudnn curves (the kernel the executor runs). From the repository root, build-gpubin/.
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-build-gpubin}
R=docs/calibration/runs/2026-12-06-h100
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > $OUT/gpu2.txt
timeout 300 $B/moesim calibrate --out $R/h100-executor.json > $OUT/calibrate.log 2>&1; echo "calibrate rc=$? at $(( $(date +%s) - START )) s"
cp $R/h100-executor.json $OUT/ || exit 1
V=$OUT/v; mkdir -p $V
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu k3-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu-pad k3-slice-1gpu-selective k3-slice-1gpu-seq12k; do
  timeout 100 $B/moesim validate scenarios/calibration/$s.json --hardware $R/h100-x1-executor.json --json > $V/validate-$s.json 2> $V/validate-$s.err
  echo "$s rc=$? at $(( $(date +%s) - START )) s"
done
for s in llama-8b-slice-1gpu-cudnn qwen3-moe-slice-1gpu-cudnn; do
  timeout 100 $B/moesim validate $R/$s.json --json > $V/validate-$s.json 2> $V/validate-$s.err
  echo "$s rc=$? at $(( $(date +%s) - START )) s"
done
tar czf $OUT/validate2.tgz -C $V . && rm -rf $V
