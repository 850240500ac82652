#!/bin/bash
# Second device call: AdamW without a BF16 copy (kernels GPU test), then `moesim validate` on the
# full fine-tuning scenario (text and JSON) with the shipped calibration.
export NCCL_NVLS_ENABLE=0
B=build-cuda/dist
exec > >(tee $OUT/log.txt) 2>&1
date -u
timeout 150 $B/test_backend_kernels_gpu > /tmp/t.txt 2>&1; echo "kernels gpu test rc=$?"; tail -n 3 /tmp/t.txt
timeout 150 $B/moesim validate scenarios/calibration/k3-slice-2gpu-ft.json > $OUT/validate-2gpu-ft.txt 2>&1; echo "validate ft rc=$?"
head -n 8 $OUT/validate-2gpu-ft.txt
timeout 150 $B/moesim validate scenarios/calibration/k3-slice-2gpu-ft.json --json > $OUT/validate-2gpu-ft.json 2>&1; echo "validate --json ft rc=$?"
python3 -c "import json; j=json.load(open('$OUT/validate-2gpu-ft.json')); print({k: round(j[k]['error']*100,2) for k in ['step_time','peak_memory_total','peak_memory_slab','peak_memory_tensors_gpu_time']})"
date -u
