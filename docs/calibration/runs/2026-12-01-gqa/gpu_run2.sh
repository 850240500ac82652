#!/bin/bash
# Second device run (one H200) after aligning the CCE chunks and adding the short-row RMSNorm: the
# backend kernel and executor GPU tests, then `moesim validate` (text, then JSON) on the two 1-GPU
# GQA scenarios and, as a regression check, the K3 1-GPU slice.
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0
FINAL=${OUT:-/tmp/out}
OUT=$FINAL/r
mkdir -p $OUT
date -u > $OUT/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
run() { local name=$1; shift; local t0=$(date +%s); timeout 150 "$@" > $OUT/$name.txt 2>&1; local rc=$?; echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a $OUT/rc.txt; return $rc; }
run test_kernels_gpu ./test_backend_kernels_gpu
run test_op_kernels_gpu ./test_backend_op_kernels_gpu
(cd .. && run test_executor_gpu ./build-gpu-gqa/test_backend_executor_gpu)
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu k3-slice-1gpu; do
  run validate_$s ./moesim validate scenarios/calibration/$s.json
  run validate_${s}_json ./moesim validate --json scenarios/calibration/$s.json
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/gpu.txt 2>&1
echo "=== rc"; cat $OUT/rc.txt
echo "=== gpu"; cat $OUT/gpu.txt
for t in kernels op_kernels executor; do echo "=== $t"; grep -E "ERROR|FAIL" $OUT/test_${t}_gpu.txt | head -5; tail -3 $OUT/test_${t}_gpu.txt; done
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu; do echo "=== $s"; head -32 $OUT/validate_$s.txt; done
echo "=== k3"; head -8 $OUT/validate_k3-slice-1gpu.txt
