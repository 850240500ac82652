#!/usr/bin/env bash
# One call on a lent H100 (2026-12-06): the executor calibrated with the linear layers' GEMMs
# measured pass by pass at their own shapes (kernels/gemm_shapes, calibration format 7), then the
# seven 1-GPU calibration scenarios validated twice against it: with those tables
# (h100-x1-executor.json) and with the same file stripped of them (h100-x1-executor-no-shapes.json:
# the min(m, n, k) table as before). From the repository root, binaries in build-gpubin/.
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-build-gpubin}
R=docs/calibration/runs/2026-12-06-h100-gemm-shapes
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt
timeout 300 $B/moesim calibrate --out $R/h100-executor.json > $OUT/calibrate.log 2>&1; echo "calibrate rc=$? at $(( $(date +%s) - START )) s"
cp $R/h100-executor.json $OUT/ || exit 1
python3 -c "
import json,sys
d=json.load(open('$R/h100-executor.json')); d['kernels'].pop('gemm_shapes', None)
json.dump(d, open('$R/h100-executor-no-shapes.json','w'), indent=1)"
V=$OUT/v; mkdir -p $V
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu k3-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu-pad k3-slice-1gpu-selective k3-slice-1gpu-seq12k; do
  for h in h100-x1-executor h100-x1-executor-no-shapes; do
    timeout 60 $B/moesim validate scenarios/calibration/$s.json --hardware $R/$h.json --json > $V/validate-$s-$h.json 2> $V/validate-$s-$h.err
    echo "$s $h rc=$? at $(( $(date +%s) - START )) s"
  done
done
tar czf $OUT/validate.tgz -C $V . && rm -rf $V
