#!/usr/bin/env bash
# One call on a lent GPU (2026-12-06; an H200 when no H100 was lent): the SM clock and board power (nvidia-smi every 100 ms)
# while `moesim calibrate --only gemm` measures its GEMM tables back to back, and while the executor
# runs two calibration scenarios' steps (validate). Question: at what clock were the GEMM tables
# measured, and at what clock does the step run its GEMMs? From the repository root, binaries in
# build-gpubin/.
set -u
B=${B:-build-gpubin}
HW=${HW:-docs/calibration/runs/2026-12-06-h100-gemm-shapes/h100-x1-executor.json}  # on an H200: hardware/h200-x2.json
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,nounits -lms 100 > $OUT/smi.csv &
P=$!
sleep 2
mark() { echo "$1 $(date -u +%Y/%m/%d\ %H:%M:%S.%N)" >> $OUT/marks.txt; }
mark calibrate_start
timeout 200 $B/moesim calibrate --only gemm --out $OUT/gemm.json > $OUT/calibrate.log 2>&1; echo "calibrate rc=$?"
mark calibrate_end
sleep 3
for s in llama-8b-slice-1gpu k3-slice-1gpu; do
  mark ${s}_start
  timeout 90 $B/moesim validate scenarios/calibration/$s.json --hardware $HW --json > $OUT/validate-$s.json 2> $OUT/validate-$s.err
  echo "$s rc=$?"
  mark ${s}_end
  sleep 3
done
kill $P
