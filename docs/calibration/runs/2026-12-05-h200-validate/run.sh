#!/usr/bin/env bash
# One call on a lent H200: the seven 1-GPU calibration scenarios validated with the power model
# in h200-x2 (moesim validate: measured on the executor, predicted in the step's power state), with
# the board's SM clock and power sampled every 50 ms beside them; then bench/power_duty_reference.py,
# whose kinds-alone and mix phases give the H200's attention and memory-bound power (the files
# carry the H100's). Stops at once on any other GPU: h200.json's tables describe an H200.
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-build-gpubin}
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.mem,temperature.gpu --format=csv > $OUT/machine.txt
cat $OUT/machine.txt
grep -q H200 $OUT/machine.txt || { echo "not an H200: stopping"; exit 3; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader -lms 50 > $OUT/smi.csv &
SMI=$!
SCENARIOS=${SCENARIOS:-"k3-slice-1gpu k3-slice-1gpu-selective k3-slice-1gpu-seq12k llama-8b-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu qwen3-moe-slice-1gpu-pad"}
for s in $SCENARIOS; do
  echo "$s start $(date -u +%H:%M:%S.%N)" >> $OUT/phases.txt
  timeout 150 "$B/moesim" validate scenarios/calibration/$s.json --json > $OUT/validate-$s.json 2> $OUT/validate-$s.err
  echo "$s end $(date -u +%H:%M:%S.%N) rc=$?" >> $OUT/phases.txt
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); s=j['step_time']; m=j['peak_memory_total']; p=j.get('power_state',{}); print(sys.argv[1].split('/')[-1], 'measured %.4f predicted %.4f error %+.1f%% memory %+.1f%% clock %.3f' % (s['measured_s'], s['predicted_s'], 100*s['error'], 100*m['error'], p.get('clock',0)))" $OUT/validate-$s.json || tail -3 $OUT/validate-$s.err
done
kill $SMI
[ -n "${SKIP_DUTY:-}" ] && exit 0
cd bench
timeout 240 python3 power_duty_reference.py --out $OUT/power_duty.json > $OUT/power_duty.txt 2>&1; echo "power_duty rc=$?"; tail -30 $OUT/power_duty.txt
