#!/bin/bash
# Device run for GQA/MHA models in the executor (one H200: the 2-GPU kind was not lent): the executor's GQA
# kernels' GPU tests, then `moesim validate` (text, then JSON) on the 1-GPU GQA calibration scenarios.
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0
FINAL=${OUT:-/tmp/out}
OUT=$FINAL/r
mkdir -p $OUT
date -u > $OUT/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
run() { local name=$1; shift; local t0=$(date +%s); timeout 150 "$@" > $OUT/$name.txt 2>&1; local rc=$?; echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a $OUT/rc.txt; return $rc; }
run test_op_kernels_gpu ./test_backend_op_kernels_gpu
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu; do
  run validate_$s ./moesim validate scenarios/calibration/$s.json
  run validate_${s}_json ./moesim validate --json scenarios/calibration/$s.json
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/gpu.txt 2>&1
echo "=== rc"; cat $OUT/rc.txt
echo "=== gpu"; cat $OUT/gpu.txt
echo "=== op kernels"; tail -4 $OUT/test_op_kernels_gpu.txt
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu; do echo "=== $s"; tail -45 $OUT/validate_$s.txt; done
