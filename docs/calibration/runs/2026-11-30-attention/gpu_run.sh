#!/bin/bash
# One device call: GPU tests, `moesim calibrate`, then `moesim validate` on both calibration
# scenarios with the new calibration file installed (this copy only).
export NCCL_NVLS_ENABLE=0
B=build-cuda/dist
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm --format=csv; nvidia-smi topo -m; } > $OUT/machine.txt 2>&1
for t in kernels nccl executor; do
  timeout 100 $B/test_backend_${t}_gpu > $OUT/test-$t-gpu.txt 2>&1; echo "gpu test $t rc=$?"; tail -n 2 $OUT/test-$t-gpu.txt
done
date -u
timeout 300 $B/moesim calibrate --out $OUT/h200.json > $OUT/calibrate.txt 2> $OUT/calibrate.log; rc=$?
echo "calibrate rc=$rc"; date -u; grep -A40 "^Attention" $OUT/calibrate.txt
[ $rc = 0 ] || { tail -20 $OUT/calibrate.log; exit 1; }
cp $OUT/h200.json hardware/calibration/h200.json
for s in 1gpu 2gpu; do
  V=0; [ $s = 2gpu ] && V=0,1
  CUDA_VISIBLE_DEVICES=$V timeout 75 $B/moesim validate scenarios/calibration/k3-slice-$s.json --json > $OUT/validate-$s.json 2>&1
  echo "validate --json $s rc=$?"
  CUDA_VISIBLE_DEVICES=$V timeout 75 $B/moesim validate scenarios/calibration/k3-slice-$s.json > $OUT/validate-$s.txt 2>&1
  echo "validate $s rc=$?"
  head -n 8 $OUT/validate-$s.txt
done
date -u
