#!/bin/bash
# One device call: kernels GPU test, `moesim calibrate` with GEMM autotuning, then `moesim validate`
# on both calibration scenarios with that calibration file installed (this copy only).
export NCCL_NVLS_ENABLE=0
B=build-gemmtune
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
timeout 150 $B/test_backend_kernels_gpu > $OUT/test-kernels-gpu.txt 2>&1; echo "kernels gpu test rc=$?"; tail -n 2 $OUT/test-kernels-gpu.txt
timeout 240 $B/moesim calibrate --out $OUT/h200.json > $OUT/calibrate.txt 2> $OUT/calibrate.log; rc=$?
echo "calibrate rc=$rc"; date -u
[ $rc = 0 ] || { tail -20 $OUT/calibrate.log; exit 1; }
cp $OUT/h200.json hardware/calibration/h200.json
for s in 1gpu 2gpu; do
  V=0; [ $s = 2gpu ] && V=0,1
  CUDA_VISIBLE_DEVICES=$V timeout 75 $B/moesim validate scenarios/calibration/k3-slice-$s.json --json > $OUT/validate-$s.json 2>&1
  echo "validate --json $s rc=$?"
  CUDA_VISIBLE_DEVICES=$V timeout 75 $B/moesim validate scenarios/calibration/k3-slice-$s.json > $OUT/validate-$s.txt 2>&1
  echo "validate $s rc=$?"
  head -n 12 $OUT/validate-$s.txt
done
grep -B2 -A36 "^GEMM" $OUT/calibrate.txt | head -50
date -u
