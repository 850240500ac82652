#!/bin/bash
# Third device call: `moesim calibrate` with the attention ops timed on the full fine-tuning graph
# (the DSA indexer's backward gets a table), installed (this copy only), then `moesim validate`
# on all three calibration scenarios.
export NCCL_NVLS_ENABLE=0
B=build-cuda/dist
exec > >(tee $OUT/log.txt) 2>&1
date -u
timeout 240 $B/moesim calibrate --out $OUT/h200.json > $OUT/calibrate.txt 2> /tmp/calibrate.log; rc=$?
echo "calibrate rc=$rc"; date -u
[ $rc = 0 ] || { tail -20 /tmp/calibrate.log; exit 1; }
cp $OUT/h200.json hardware/calibration/h200.json
for s in 1gpu 2gpu 2gpu-ft; do
  V=0,1; [ $s = 1gpu ] && V=0
  CUDA_VISIBLE_DEVICES=$V timeout 150 $B/moesim validate scenarios/calibration/k3-slice-$s.json --json > $OUT/validate-$s.json 2>&1
  echo "validate --json $s rc=$?"
  python3 -c "import json; j=json.load(open('$OUT/validate-$s.json')); print('$s', {k: round(j[k]['error']*100,2) for k in ['step_time','peak_memory_total','peak_memory_slab','peak_memory_tensors_gpu_time']})"
done
timeout 150 $B/moesim validate scenarios/calibration/k3-slice-2gpu-ft.json > $OUT/validate-2gpu-ft.txt 2>&1; echo "validate ft rc=$?"
head -n 8 $OUT/validate-2gpu-ft.txt
grep -A14 "^Attention" $OUT/calibrate.txt
date -u
