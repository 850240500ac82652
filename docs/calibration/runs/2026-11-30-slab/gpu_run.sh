#!/bin/bash
# One device call (2 x H200): the executor GPU test, `moesim calibrate` (format 3: with the
# software stack's memory), then `moesim validate` on both calibration scenarios with that file
# installed (this copy only). Seven files come back: log.txt, calibrate.txt, h200.json and the
# text and JSON output of each validate.
export NCCL_NVLS_ENABLE=0
B=build-cuda/dist
exec > >(tee $OUT/log.txt) 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
timeout 120 $B/test_backend_executor_gpu > /tmp/t.txt 2>&1; echo "executor gpu test rc=$?"; tail -n 3 /tmp/t.txt
timeout 240 $B/moesim calibrate --out $OUT/h200.json > $OUT/calibrate.txt 2> /tmp/calibrate.log; rc=$?
echo "calibrate rc=$rc"; date -u
[ $rc = 0 ] || { tail -20 /tmp/calibrate.log; exit 1; }
cp $OUT/h200.json hardware/calibration/h200.json
for s in 1gpu 2gpu; do
  V=0; [ $s = 2gpu ] && V=0,1
  CUDA_VISIBLE_DEVICES=$V timeout 90 $B/moesim validate scenarios/calibration/k3-slice-$s.json --json > $OUT/validate-$s.json 2>&1
  echo "validate --json $s rc=$?"
  CUDA_VISIBLE_DEVICES=$V timeout 90 $B/moesim validate scenarios/calibration/k3-slice-$s.json > $OUT/validate-$s.txt 2>&1
  echo "validate $s rc=$?"
  head -n 8 $OUT/validate-$s.txt
done
grep -A2 "Software stack" $OUT/calibrate.txt
date -u
