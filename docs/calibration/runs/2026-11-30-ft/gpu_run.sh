#!/bin/bash
# One device call (2 x H200): the executor's own kernels against their references (the embedding
# gradient's scatter-add is new), the executor's GPU test, then `moesim validate` with the shipped
# calibration (hardware/calibration/h200.json, 09:43 run) on the new full fine-tuning scenario
# (text and JSON) and again on the two earlier scenarios (JSON).
export NCCL_NVLS_ENABLE=0
B=build-cuda/dist
exec > >(tee $OUT/log.txt) 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
timeout 120 $B/test_backend_op_kernels_gpu > /tmp/t1.txt 2>&1; echo "op kernels gpu test rc=$?"; tail -n 3 /tmp/t1.txt
timeout 120 $B/test_backend_executor_gpu > /tmp/t2.txt 2>&1; echo "executor gpu test rc=$?"; tail -n 3 /tmp/t2.txt
timeout 150 $B/moesim validate scenarios/calibration/k3-slice-2gpu-ft.json > $OUT/validate-2gpu-ft.txt 2>&1; echo "validate ft rc=$?"
head -n 8 $OUT/validate-2gpu-ft.txt
timeout 150 $B/moesim validate scenarios/calibration/k3-slice-2gpu-ft.json --json > $OUT/validate-2gpu-ft.json 2>&1; echo "validate --json ft rc=$?"
for s in 1gpu 2gpu; do
  V=0; [ $s = 2gpu ] && V=0,1
  CUDA_VISIBLE_DEVICES=$V timeout 90 $B/moesim validate scenarios/calibration/k3-slice-$s.json --json > $OUT/validate-$s.json 2>&1
  echo "validate --json $s rc=$?"
  python3 -c "import json,sys; j=json.load(open('$OUT/validate-$s.json')); print('$s', {k: round(j[k]['error']*100,2) for k in ['step_time','peak_memory_total','peak_memory_slab','peak_memory_tensors_gpu_time']})"
done
date -u
